//! How the host reaches a server in a container that has no network (`network: none`): a TCP
//! listener on the host's loopback, and one long-lived `docker exec` of the server binary's
//! multiplexer (`uniagent-sandbox --relay-mux 127.0.0.1:<port>`) inside the container, attached
//! to its stdin and stdout without a TTY. Every accepted connection becomes a connection id on
//! that exec's stream ([`crate::mux`]: framed, half-closes carried, credit-based flow control),
//! so the daemon sees one exec per sandbox, not one per connection.
//!
//! The container itself has only loopback: nothing in it can reach the host, other sandboxes or
//! the internet, and no iptables rules are needed.
//!
//! When the exec dies (the process was killed, the daemon restarted), the connections on it
//! fail at once, and the next accepted connection starts a new exec. Every task (the accept
//! loop, each connection, the stream) belongs to the [`Relay`]; dropping it stops them all and
//! closes the exec's stdin, which ends the multiplexer in the container.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::Docker;
use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use uniagent_core::{Error, Result};

use super::engine::{count_call, sandbox_error, within};
use super::payload::{BIN_DIR, SERVER_NAME};
use crate::mux::{Role, Session};

/// Deadline of each Docker call that starts the multiplexer exec.
const MUX_START_TIMEOUT: Duration = Duration::from_secs(30);

/// What a relay did so far, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Client connections accepted.
    pub connections: u64,
    /// Multiplexer execs started (one, plus one after each time an exec died).
    pub mux_execs: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    mux_execs: AtomicU64,
}

/// A running relay; dropping it stops the listener, every connection and the exec's stream.
#[derive(Debug)]
pub(crate) struct Relay {
    address: SocketAddr,
    counters: Arc<Counters>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet (aborting every connection) and with the
        // last clone of the session its task, which drops the exec's stdin.
        self.accept_loop.abort();
    }
}

/// Where the multiplexer exec runs and the current stream (`None` before the first connection
/// or after a start failed).
struct Target {
    docker: Docker,
    container: String,
    port: u16,
    counters: Arc<Counters>,
    session: Mutex<Option<Session>>,
}

impl Relay {
    /// Binds 127.0.0.1:0 on the host and relays each connection to `127.0.0.1:port` inside
    /// container `id`.
    pub(crate) async fn start(docker: Docker, id: String, port: u16) -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::io("binding the relay's loopback listener", e))?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::io("reading the relay's address", e))?;
        let counters = Arc::new(Counters::default());
        let target = Arc::new(Target {
            docker,
            container: id,
            port,
            counters: counters.clone(),
            session: Mutex::new(None),
        });
        let accept_loop = tokio::spawn(accept_loop(listener, target));
        Ok(Self {
            address,
            counters,
            accept_loop,
        })
    }

    /// The base URL clients use.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// What the relay did so far.
    pub(crate) fn stats(&self) -> RelayStats {
        RelayStats {
            connections: self.counters.connections.load(Ordering::Relaxed),
            mux_execs: self.counters.mux_execs.load(Ordering::Relaxed),
        }
    }
}

async fn accept_loop(listener: TcpListener, target: Arc<Target>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    target.counters.connections.fetch_add(1, Ordering::Relaxed);
                    let target = target.clone();
                    connections.spawn(async move {
                        if let Err(e) = relay_connection(client, &target).await {
                            tracing::debug!(container = %target.container, error = %e, "relay connection failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the relay listener failed; retrying");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            // Reap finished connections so the set does not grow with the connection count.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One client connection: a connection id on the current stream (started if there is none).
async fn relay_connection(client: TcpStream, target: &Target) -> Result<()> {
    let _ = client.set_nodelay(true);
    let session = target.session().await?;
    let conn = session.open().await?;
    session.run(conn, client).await;
    Ok(())
}

impl Target {
    /// The running stream, or a new one when it ended (one start at a time: the lock).
    async fn session(&self) -> Result<Session> {
        let mut current = self.session.lock().await;
        if let Some(session) = current.as_ref().filter(|s| s.is_open()) {
            return Ok(session.clone());
        }
        // Dropping the dead stream first releases its exec's attachment.
        *current = None;
        let session = self.start_mux().await?;
        *current = Some(session.clone());
        Ok(session)
    }

    /// Starts the multiplexer exec and a stream over its stdin and stdout.
    async fn start_mux(&self) -> Result<Session> {
        let create = CreateExecOptions {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            cmd: Some(vec![
                format!("{BIN_DIR}/{SERVER_NAME}"),
                "--relay-mux".to_owned(),
                format!("127.0.0.1:{}", self.port),
            ]),
            ..Default::default()
        };
        count_call();
        let exec = within(
            "creating the relay exec",
            MUX_START_TIMEOUT,
            self.docker.create_exec(&self.container, create),
        )
        .await?;
        let start = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: Some(256 << 10),
        };
        count_call();
        let started = within(
            "starting the relay exec",
            MUX_START_TIMEOUT,
            self.docker.start_exec(&exec.id, Some(start)),
        )
        .await?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(sandbox_error("the relay exec started detached"));
        };
        self.counters.mux_execs.fetch_add(1, Ordering::Relaxed);
        let container = self.container.clone();
        // The exec's stdout is the stream; its stderr (the multiplexer's complaints) is logged.
        let stream = output
            .filter_map(move |frame| {
                let container = container.clone();
                async move {
                    match frame {
                        Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                            Some(Ok(message))
                        }
                        Ok(LogOutput::StdErr { message }) => {
                            tracing::debug!(%container, message = %String::from_utf8_lossy(&message).trim_end(), "relay");
                            None
                        }
                        Ok(LogOutput::StdIn { .. }) => None,
                        Err(e) => Some(Err(std::io::Error::other(e))),
                    }
                }
            })
            .boxed();
        let (session, _opened) = Session::start(Role::Host, stream, input);
        Ok(session)
    }
}
