//! One multiplexed stream and the TCP connections it carries; the same engine runs on both
//! ends (the host opens connections, the container accepts them).
//!
//! Tasks: one task reads frames and dispatches them without ever waiting (so one connection
//! cannot stall the others), and writes queued frames to the stream; each connection is two
//! loops run by its caller ([`Session::run`]). Frames that must stay in order with a
//! connection's bytes (`OPEN`, `DATA`, `FIN`) share one bounded queue; `CREDIT` and `RESET` go
//! ahead of them in a queue of their own, so granting credit never waits behind data.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::Either;
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use uniagent_core::{Error, Result};

use super::frame::{Decoder, Frame, MAX_PAYLOAD};

/// Bytes either end may send on one connection before the receiver grants more.
///
/// Flow control is credit-based (as in HTTP/2 or SSH channels) rather than a buffer cap that
/// resets a slow connection: a client that reads a large answer slowly is slowed down, not cut
/// off, and a stalled one holds at most this much in the other end's memory while its peer
/// socket simply stops being read (TCP back-pressure reaches the server or the client). Memory
/// is bounded by `WINDOW` per connection and direction.
pub const WINDOW: usize = 256 << 10;

/// How long a connection whose one direction finished (a `FIN` each way) waits for the other.
const DRAIN_AFTER_FIN: Duration = Duration::from_secs(30);

/// How long one write of frames to the stream may take: the other end reads without waiting,
/// so a write that stalls this long means a wedged daemon or a stuck process.
const WRITE_STALL: Duration = Duration::from_secs(30);

/// Frames queued for the stream before senders of data wait.
const DATA_QUEUE: usize = 64;

/// Bytes of queued frames written to the stream in one write.
const BATCH_BYTES: usize = 256 << 10;

/// Which end of the stream this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opens connections (the host's relay).
    Host,
    /// Accepts `OPEN` frames (the relay inside the container).
    Container,
}

/// A connection registered on a session, handed to [`Session::run`] with its socket.
#[derive(Debug)]
pub struct Conn {
    id: u32,
    inbound: mpsc::UnboundedReceiver<Inbound>,
    credit: Arc<Semaphore>,
    pending: Arc<AtomicUsize>,
}

impl Conn {
    /// The connection's id on the stream.
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// What the reader delivers to a connection.
#[derive(Debug)]
enum Inbound {
    Data(Bytes),
    Fin,
}

/// The reader's side of a connection.
#[derive(Debug)]
struct Entry {
    inbound: mpsc::UnboundedSender<Inbound>,
    credit: Arc<Semaphore>,
    /// Bytes delivered but not yet granted back: the peer may not exceed [`WINDOW`].
    pending: Arc<AtomicUsize>,
    fin_received: bool,
}

impl Drop for Entry {
    fn drop(&mut self) {
        // Wakes a sender waiting for credit: the connection is gone.
        self.credit.close();
    }
}

#[derive(Debug)]
struct Shared {
    role: Role,
    conns: Mutex<HashMap<u32, Entry>>,
    data: mpsc::Sender<Frame>,
    control: mpsc::UnboundedSender<Frame>,
    next_id: AtomicU32,
    closed: AtomicBool,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Entry>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, id: u32) -> Conn {
        let (tx, rx) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(WINDOW));
        let pending = Arc::new(AtomicUsize::new(0));
        self.conns().insert(
            id,
            Entry {
                inbound: tx,
                credit: credit.clone(),
                pending: pending.clone(),
                fin_received: false,
            },
        );
        Conn {
            id,
            inbound: rx,
            credit,
            pending,
        }
    }

    /// Drops connection `id` and tells the peer.
    fn reset(&self, id: u32) {
        if self.conns().remove(&id).is_some() {
            let _ = self.control.send(Frame::Reset { id });
        }
    }

    /// Fails every connection: the stream is gone.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.conns().clear();
    }

    /// Handles one frame from the peer without waiting.
    fn dispatch(&self, frame: Frame, opened: &mpsc::UnboundedSender<Conn>) {
        match frame {
            Frame::Open { id } => {
                let duplicate = self.conns().contains_key(&id);
                if self.role == Role::Host || duplicate {
                    tracing::debug!(id, "relay mux: unexpected OPEN");
                    self.conns().remove(&id);
                    let _ = self.control.send(Frame::Reset { id });
                    return;
                }
                let conn = self.register(id);
                if opened.send(conn).is_err() {
                    self.reset(id);
                }
            }
            Frame::Data { id, bytes } => {
                let mut conns = self.conns();
                // Bytes of a connection this end already dropped are in flight: ignored.
                let Some(entry) = conns.get_mut(&id) else {
                    return;
                };
                let pending = entry.pending.fetch_add(bytes.len(), Ordering::SeqCst) + bytes.len();
                if entry.fin_received || pending > WINDOW {
                    drop(conns);
                    tracing::debug!(id, "relay mux: data past FIN or beyond the window");
                    self.reset(id);
                    return;
                }
                let _ = entry.inbound.send(Inbound::Data(bytes));
            }
            Frame::Fin { id } => {
                if let Some(entry) = self.conns().get_mut(&id) {
                    entry.fin_received = true;
                    let _ = entry.inbound.send(Inbound::Fin);
                }
            }
            Frame::Reset { id } => {
                self.conns().remove(&id);
            }
            Frame::Credit { id, bytes } => {
                let conns = self.conns();
                let Some(entry) = conns.get(&id) else {
                    return;
                };
                let granted = bytes as usize;
                if entry.credit.available_permits().saturating_add(granted) > WINDOW {
                    drop(conns);
                    tracing::debug!(id, "relay mux: credit beyond the window");
                    self.reset(id);
                    return;
                }
                entry.credit.add_permits(granted);
            }
        }
    }
}

/// One end of a multiplexed stream. Clones share it; when the last clone is dropped the
/// stream's task stops and every connection on it fails.
#[derive(Debug, Clone)]
pub struct Session {
    shared: Arc<Shared>,
    _task: Arc<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The bytes of the stream as they arrive.
pub type Incoming = BoxStream<'static, std::io::Result<Bytes>>;
/// Where frames are written.
pub type Outgoing = Pin<Box<dyn AsyncWrite + Send>>;

/// The bytes `reader` yields, as a stream's [`Incoming`] (ends at EOF or after an error).
pub fn incoming<R>(reader: R) -> Incoming
where
    R: AsyncRead + Send + Unpin + 'static,
{
    futures::stream::unfold(Some(reader), |reader| async move {
        let mut reader = reader?;
        let mut buf = BytesMut::with_capacity(MAX_PAYLOAD);
        match reader.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), Some(reader))),
            Err(e) => Some((Err(e), None)),
        }
    })
    .boxed()
}

impl Session {
    /// Runs the stream `input`/`output` as `role`. The receiver yields the connections the peer
    /// opens (only a container's peer opens any); it ends when the stream does.
    pub fn start(
        role: Role,
        input: Incoming,
        output: Outgoing,
    ) -> (Self, mpsc::UnboundedReceiver<Conn>) {
        let (data_tx, data_rx) = mpsc::channel(DATA_QUEUE);
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (opened_tx, opened_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            role,
            conns: Mutex::new(HashMap::new()),
            data: data_tx,
            control: control_tx,
            next_id: AtomicU32::new(1),
            closed: AtomicBool::new(false),
        });
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                let reader = std::pin::pin!(read_loop(&shared, input, opened_tx));
                let writer = std::pin::pin!(write_loop(data_rx, control_rx, output));
                match futures::future::select(reader, writer).await {
                    Either::Left(((), _)) => tracing::debug!("relay mux: the stream ended"),
                    Either::Right((result, _)) => {
                        tracing::debug!(?result, "relay mux: writing the stream stopped");
                    }
                }
                shared.close();
            }
        });
        let session = Self {
            shared,
            _task: Arc::new(AbortOnDrop(task)),
        };
        (session, opened_rx)
    }

    /// Whether the stream still runs (new connections can be opened on it).
    pub fn is_open(&self) -> bool {
        !self.shared.closed.load(Ordering::SeqCst)
            && self.shared.next_id.load(Ordering::SeqCst) < u32::MAX
    }

    /// How many connections the stream carries now.
    pub fn connections(&self) -> usize {
        self.shared.conns().len()
    }

    /// Opens a new connection (host side): registers it and sends `OPEN`.
    pub async fn open(&self) -> Result<Conn> {
        // Ids are never reused on one stream: a late frame cannot reach a newer connection.
        let id = self.shared.next_id.fetch_add(1, Ordering::SeqCst);
        if id == u32::MAX || self.shared.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        let conn = self.shared.register(id);
        if self.shared.data.send(Frame::Open { id }).await.is_err() {
            self.shared.conns().remove(&id);
            return Err(closed_error());
        }
        Ok(conn)
    }

    /// Refuses a connection the peer opened (its target could not be reached).
    pub fn refuse(&self, conn: Conn) {
        self.shared.reset(conn.id);
    }

    /// Carries `conn` over `socket` until both directions ended with a `FIN` (or one did and
    /// the other did not within a bound), or either end reset it, or the stream ended.
    pub async fn run<S>(&self, conn: Conn, socket: S)
    where
        S: AsyncRead + AsyncWrite + Send,
    {
        let id = conn.id;
        let clean = pump(&self.shared, conn, socket).await;
        // Still registered: this end gives up (or finished); the peer must hear of it unless
        // both FINs went through, after which it drops the connection itself.
        if let Some(entry) = self.shared.conns().remove(&id) {
            if !clean {
                let _ = self.shared.control.send(Frame::Reset { id });
            }
            drop(entry);
        }
    }
}

fn closed_error() -> Error {
    Error::Sandbox {
        backend: "docker".into(),
        message: "the relay multiplexer stream has ended".into(),
        retryable: true,
        source: None,
    }
}

/// Both directions of one connection; `true` when both ended with a `FIN`.
async fn pump<S>(shared: &Shared, conn: Conn, socket: S) -> bool
where
    S: AsyncRead + AsyncWrite + Send,
{
    let Conn {
        id,
        mut inbound,
        credit,
        pending,
    } = conn;
    let (mut from_socket, mut to_socket) = tokio::io::split(socket);
    // Socket to stream, within the credit the peer granted.
    let outgoing = async {
        let mut buf = vec![0u8; MAX_PAYLOAD];
        loop {
            let Ok(permit) = credit.acquire().await else {
                return false;
            };
            permit.forget();
            let mut granted = 1;
            let more = credit.available_permits().min(MAX_PAYLOAD - 1);
            if more > 0 {
                if let Ok(permits) = credit.try_acquire_many(u32::try_from(more).unwrap_or(0)) {
                    permits.forget();
                    granted += more;
                }
            }
            let n = match from_socket.read(&mut buf[..granted]).await {
                Ok(n) => n,
                Err(_) => return false,
            };
            credit.add_permits(granted - n);
            let frame = if n == 0 {
                Frame::Fin { id }
            } else {
                Frame::Data {
                    id,
                    bytes: Bytes::copy_from_slice(&buf[..n]),
                }
            };
            if shared.data.send(frame).await.is_err() {
                return false;
            }
            if n == 0 {
                return true;
            }
        }
    };
    // Stream to socket; each chunk written grants its bytes back to the peer.
    let incoming = async {
        while let Some(message) = inbound.recv().await {
            match message {
                Inbound::Data(bytes) => {
                    if to_socket.write_all(&bytes).await.is_err() {
                        return false;
                    }
                    pending.fetch_sub(bytes.len(), Ordering::SeqCst);
                    let granted = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                    if granted > 0 {
                        let _ = shared.control.send(Frame::Credit { id, bytes: granted });
                    }
                }
                Inbound::Fin => {
                    let _ = to_socket.shutdown().await;
                    return true;
                }
            }
        }
        // The sender is gone: reset by the peer, or the stream ended.
        false
    };
    let outgoing = std::pin::pin!(outgoing);
    let incoming = std::pin::pin!(incoming);
    match futures::future::select(outgoing, incoming).await {
        Either::Left((true, rest)) => {
            matches!(tokio::time::timeout(DRAIN_AFTER_FIN, rest).await, Ok(true))
        }
        Either::Right((true, rest)) => {
            matches!(tokio::time::timeout(DRAIN_AFTER_FIN, rest).await, Ok(true))
        }
        _ => false,
    }
}

/// Decodes the stream and dispatches its frames until it ends or breaks the protocol.
async fn read_loop(shared: &Shared, mut input: Incoming, opened: mpsc::UnboundedSender<Conn>) {
    let mut decoder = Decoder::new();
    while let Some(chunk) = input.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                tracing::debug!(error = %e, "relay mux: reading the stream failed");
                return;
            }
        };
        decoder.push(&chunk);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => shared.dispatch(frame, &opened),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "relay mux: bad frame; closing the stream");
                    return;
                }
            }
        }
    }
    if let Err(e) = decoder.finish() {
        tracing::debug!(error = %e, "relay mux: the stream ended inside a frame");
    }
}

/// Writes queued frames, control first, batching what is already queued.
async fn write_loop(
    mut data: mpsc::Receiver<Frame>,
    mut control: mpsc::UnboundedReceiver<Frame>,
    mut output: Outgoing,
) -> Result<()> {
    let mut buf = BytesMut::with_capacity(BATCH_BYTES + MAX_PAYLOAD);
    loop {
        let first = tokio::select! {
            biased;
            Some(frame) = control.recv() => frame,
            Some(frame) = data.recv() => frame,
            else => return Ok(()),
        };
        first.encode(&mut buf);
        while buf.len() < BATCH_BYTES {
            if let Ok(frame) = control.try_recv() {
                frame.encode(&mut buf);
            } else if let Ok(frame) = data.try_recv() {
                frame.encode(&mut buf);
            } else {
                break;
            }
        }
        let write = async {
            output.write_all(&buf).await?;
            output.flush().await
        };
        match tokio::time::timeout(WRITE_STALL, write).await {
            Ok(Ok(())) => buf.clear(),
            Ok(Err(e)) => return Err(Error::io("writing the relay multiplexer stream", e)),
            Err(_) => {
                return Err(Error::Timeout {
                    operation: "writing the relay multiplexer stream".into(),
                    after: WRITE_STALL,
                })
            }
        }
    }
}
