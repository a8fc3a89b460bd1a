//! The container's end of the multiplexer (`uniagent-sandbox --relay-mux ADDR`): each `OPEN`
//! becomes a TCP connection to the server at `ADDR`.

#[cfg(feature = "server")]
use uniagent_core::Result;

use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::task::JoinSet;

#[cfg(feature = "server")]
use super::session::incoming;
use super::session::{Conn, Incoming, Outgoing, Role, Session};

/// How long an `OPEN` retries a refused connection (the server may still be starting).
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);

/// Serves the multiplexed stream on stdin/stdout, connecting each opened connection to
/// `address`, until stdin ends (the host closed the exec) or stdout breaks.
#[cfg(feature = "server")]
pub async fn serve_stdio(address: String) -> Result<()> {
    let output: Outgoing = Box::pin(tokio::io::stdout());
    serve(incoming(tokio::io::stdin()), output, address).await;
    Ok(())
}

/// Serves the container's end of a stream: each `OPEN` becomes a connection to `address`.
/// Returns when the stream ends.
pub async fn serve(input: Incoming, output: Outgoing, address: String) {
    let (session, mut opened) = Session::start(Role::Container, input, output);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            conn = opened.recv() => match conn {
                Some(conn) => {
                    let (session, address) = (session.clone(), address.clone());
                    connections.spawn(async move { serve_one(&session, conn, &address).await });
                }
                // The stream ended: every connection on it has failed already.
                None => break,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_one(session: &Session, conn: Conn, address: &str) {
    match connect(address).await {
        Ok(socket) => {
            let _ = socket.set_nodelay(true);
            session.run(conn, socket).await;
        }
        Err(e) => {
            eprintln!("uniagent-sandbox: relay connection {}: {e}", conn.id());
            session.refuse(conn);
        }
    }
}

/// Connects to `address`, retrying while it refuses for up to [`CONNECT_PATIENCE`].
async fn connect(address: &str) -> std::io::Result<TcpStream> {
    let started = Instant::now();
    loop {
        match tokio::time::timeout(CONNECT_PATIENCE, TcpStream::connect(address)).await {
            Ok(Ok(socket)) => return Ok(socket),
            Ok(Err(e))
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && started.elapsed() < CONNECT_PATIENCE =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connecting to the server timed out",
                ))
            }
        }
    }
}
