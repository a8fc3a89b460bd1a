//! How the host reaches a server in a container that has no network (`network: none`): a TCP
//! listener on the host's loopback, and for each accepted connection a `docker exec` of the
//! server binary's relay mode (`uniagent-sandbox --relay-stdio 127.0.0.1:<port>`) inside the
//! container, attached to its stdin and stdout without a TTY (so the stream is binary-safe).
//! Bytes from the client go to the exec's stdin, the exec's stdout goes back to the client.
//!
//! The container itself has only loopback: nothing in it can reach the host, other sandboxes or
//! the internet, and no iptables rules are needed. The cost is one exec per connection, which
//! the client's keep-alive pool pays once per connection rather than per request.
//!
//! Every task (the accept loop and each connection) belongs to the [`Relay`]; dropping it stops
//! them all. An exec process that is still running dies with its container.

use std::net::SocketAddr;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::Docker;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use uniagent_core::{Error, Result};

use super::engine::docker_error;
use super::payload::{BIN_DIR, SERVER_NAME};

/// How long a connection whose client has finished sending waits for the server's last bytes.
const DRAIN_AFTER_CLIENT_EOF: Duration = Duration::from_secs(30);

/// A running relay; dropping it stops the listener and every connection.
#[derive(Debug)]
pub(crate) struct Relay {
    address: SocketAddr,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.accept_loop.abort();
    }
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
        let accept_loop = tokio::spawn(accept_loop(listener, docker, id, port));
        Ok(Self {
            address,
            accept_loop,
        })
    }

    /// The base URL clients use.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

async fn accept_loop(listener: TcpListener, docker: Docker, id: String, port: u16) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let (docker, id) = (docker.clone(), id.clone());
                    connections.spawn(async move {
                        if let Err(e) = relay_connection(client, &docker, &id, port).await {
                            tracing::debug!(container = %id, error = %e, "relay connection failed");
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

/// One client connection: an exec of the relay inside the container, bytes copied both ways.
async fn relay_connection(client: TcpStream, docker: &Docker, id: &str, port: u16) -> Result<()> {
    super::engine::count_call();
    let exec = docker
        .create_exec(
            id,
            CreateExecOptions {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                cmd: Some(vec![
                    format!("{BIN_DIR}/{SERVER_NAME}"),
                    "--relay-stdio".to_owned(),
                    format!("127.0.0.1:{port}"),
                ]),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| docker_error("creating the relay exec", e))?;
    super::engine::count_call();
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: Some(64 << 10),
            }),
        )
        .await
        .map_err(|e| docker_error("starting the relay exec", e))?;
    let StartExecResults::Attached {
        mut output,
        mut input,
    } = started
    else {
        return Err(super::engine::sandbox_error(
            "the relay exec started detached",
        ));
    };
    let _ = client.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let upstream = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if input.write_all(&buf[..n]).await.is_err() || input.flush().await.is_err() {
                break;
            }
        }
        // The end of the client's bytes becomes the end of the relay's stdin.
        let _ = input.shutdown().await;
    };
    let downstream = async move {
        while let Some(frame) = output.next().await {
            match frame {
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    if to_client.write_all(&message).await.is_err() {
                        break;
                    }
                }
                Ok(LogOutput::StdErr { message }) => {
                    tracing::debug!(message = %String::from_utf8_lossy(&message).trim_end(), "relay");
                }
                Ok(LogOutput::StdIn { .. }) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "relay output stream failed");
                    break;
                }
            }
        }
        let _ = to_client.shutdown().await;
    };
    tokio::pin!(downstream);
    tokio::select! {
        () = &mut downstream => {}
        () = upstream => {
            // The client is done sending; let the server's answer drain, within bounds.
            let _ = tokio::time::timeout(DRAIN_AFTER_CLIENT_EOF, &mut downstream).await;
        }
    }
    Ok(())
}
