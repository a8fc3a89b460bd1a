//! The relay multiplexer end to end in one process: a host session and a container session over
//! an in-memory pipe, the container's connections going to a local TCP server. Every wait has a
//! deadline.

#![cfg(any(feature = "docker", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpListener;
use uniagent_sandboxes::mux::{incoming, serve, Outgoing, Role, Session, WINDOW};

/// Deadline of every wait in these tests.
const LIMIT: Duration = Duration::from_secs(30);

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {LIMIT:?}"))
}

/// A local server: a connection that starts with `B` gets `big` bytes whatever it does (the
/// count of what was written is kept); any other is echoed back until its EOF.
async fn server(big: usize, written: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let written = written.clone();
            tokio::spawn(async move {
                let mut first = [0u8; 1];
                if socket.read_exact(&mut first).await.is_err() {
                    return;
                }
                if first[0] == b'B' {
                    let chunk = vec![7u8; 64 << 10];
                    let mut sent = 0;
                    while sent < big {
                        if socket.write_all(&chunk).await.is_err() {
                            return;
                        }
                        sent += chunk.len();
                        written.fetch_add(chunk.len(), Ordering::SeqCst);
                    }
                    return;
                }
                let (mut from, mut to) = socket.split();
                to.write_all(&first).await.unwrap();
                let _ = tokio::io::copy(&mut from, &mut to).await;
                let _ = to.shutdown().await;
            });
        }
    });
    address
}

/// A host session whose peer is a container session serving `address`; the handle stops the
/// container's end.
fn pair(address: String) -> (Session, tokio::task::JoinHandle<()>) {
    let (host_end, container_end) = tokio::io::duplex(1 << 20);
    let (host_read, host_write) = tokio::io::split(host_end);
    let (container_read, container_write) = tokio::io::split(container_end);
    let container_out: Outgoing = Box::pin(container_write);
    let container = tokio::spawn(serve(incoming(container_read), container_out, address));
    let host_out: Outgoing = Box::pin(host_write);
    let (host, _) = Session::start(Role::Host, incoming(host_read), host_out);
    (host, container)
}

/// A client connection through `host`: the returned end is the client's socket.
async fn connect(host: &Session, buffer: usize) -> DuplexStream {
    let (client, relay_end) = tokio::io::duplex(buffer);
    let conn = within("opening", host.open()).await.unwrap();
    let host = host.clone();
    tokio::spawn(async move { host.run(conn, relay_end).await });
    client
}

/// Sends `payload`, half-closes, and reads the echo to its end.
async fn echo(mut client: DuplexStream, payload: Vec<u8>) -> Vec<u8> {
    let (mut read, mut write) = tokio::io::split(&mut client);
    let send = async {
        write.write_all(&payload).await.unwrap();
        write.shutdown().await.unwrap();
    };
    let mut answer = Vec::new();
    let receive = read.read_to_end(&mut answer);
    let ((), received) = tokio::join!(send, receive);
    received.unwrap();
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_round_trip_with_half_close() {
    let address = server(0, Arc::default()).await;
    let (host, _container) = pair(address);
    let mut clients = Vec::new();
    for i in 0..40usize {
        // Larger than the window: the transfer needs credit to come back, several times.
        let payload: Vec<u8> = (0..WINDOW * 2 + i * 977)
            .map(|b| (b * 31 + i) as u8)
            .collect();
        let client = connect(&host, 16 << 10).await;
        clients.push(tokio::spawn(async move {
            let mut expected = b"E".to_vec();
            expected.extend_from_slice(&payload);
            let mut sent = b"E".to_vec();
            sent.extend_from_slice(&payload);
            assert!(echo(client, sent).await == expected, "connection {i}");
        }));
    }
    for client in clients {
        within("echo", client).await.unwrap();
    }
    // Both FINs went through: every connection is forgotten.
    for _ in 0..100 {
        if host.connections() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(host.connections(), 0);
    assert!(host.is_open());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_does_not_block_another_and_holds_bounded_memory() {
    const BIG: usize = 256 << 20;
    let written = Arc::new(AtomicUsize::new(0));
    let address = server(BIG, written.clone()).await;
    let (host, _container) = pair(address);
    // A client that asks for a large answer and never reads it.
    let mut stalled = connect(&host, 16 << 10).await;
    within("asking", stalled.write_all(b"B")).await.unwrap();
    // Others are served meanwhile, in both directions, with more than a window each.
    for i in 0..8usize {
        let client = connect(&host, 16 << 10).await;
        let mut payload = b"E".to_vec();
        payload.extend((0..WINDOW + 4096).map(|b| (b + i) as u8));
        assert!(
            within(
                "echo beside a stalled client",
                echo(client, payload.clone())
            )
            .await
                == payload
        );
    }
    // The server could write only what the window and the sockets' buffers hold, not 256 MiB:
    // back-pressure reached it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = written.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = written.load(Ordering::SeqCst);
    assert_eq!(before, after, "the server still writes to a stalled client");
    assert!(
        after < 64 << 20,
        "{after} bytes written to a stalled client"
    );
    // Reading again resumes the transfer.
    let mut buf = vec![0u8; 64 << 10];
    let mut read = 0;
    while read < 4 * WINDOW {
        let n = within("resuming", stalled.read(&mut buf)).await.unwrap();
        assert!(n > 0);
        read += n;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_stream_fails_its_connections_promptly_and_refuses_new_ones() {
    let address = server(0, Arc::default()).await;
    let (host, container) = pair(address);
    let mut client = connect(&host, 16 << 10).await;
    within("writing", client.write_all(b"Ehello"))
        .await
        .unwrap();
    let mut buf = [0u8; 6];
    within("reading", client.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"Ehello");
    // The container's end dies (its task, and with it its pipe ends, are dropped).
    container.abort();
    let mut rest = Vec::new();
    let started = std::time::Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
        .await
        .expect("a connection on a dead stream hangs");
    assert!(started.elapsed() < Duration::from_secs(5));
    for _ in 0..100 {
        if !host.is_open() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!host.is_open());
    assert!(within("opening on a dead stream", host.open())
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_target_resets_the_connection() {
    // Nothing listens there: the container's end resets the connection after its patience.
    let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = unused.local_addr().unwrap().to_string();
    drop(unused);
    let (host, _container) = pair(address);
    let mut client = connect(&host, 1024).await;
    let mut answer = Vec::new();
    let _ = within("a refused connection", client.read_to_end(&mut answer)).await;
    assert!(answer.is_empty());
    assert!(
        host.is_open(),
        "one refused connection does not end the stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_stream_closes_it() {
    let (host_end, mut peer) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(host_end);
    let out: Outgoing = Box::pin(write);
    let (host, _) = Session::start(Role::Host, incoming(read), out);
    let _conn = within("opening", host.open()).await.unwrap();
    // An unknown frame kind.
    within("writing", peer.write_all(&[0xee, 0, 0, 0, 1, 0, 0, 0, 0]))
        .await
        .unwrap();
    for _ in 0..100 {
        if !host.is_open() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!host.is_open());
}
