//! Serving an axum router so that stopping it also ends every open connection (a watch stream
//! included), which `axum::serve` does not do: each connection runs in a task of a `JoinSet`
//! owned by the accept loop, which closes them all when told to stop. `stop` waits for that, so
//! a test that stops the API and then calls it sees the failure, never a request that slipped
//! in before an asynchronous abort took effect.

use std::net::SocketAddr;
use std::sync::Mutex;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use super::util::lock;

/// Accepts connections on `listener` and serves `router` on each (HTTP/1.1) until `stop` fires
/// (or its sender is dropped); then closes the listener and every connection before it ends.
fn spawn_accept_loop(
    listener: TcpListener,
    router: Router,
    mut stop: oneshot::Receiver<()>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                biased;
                _ = &mut stop => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let service = TowerToHyperService::new(router.clone());
                    connections.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .with_upgrades()
                            .await;
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        // Aborts every connection task and waits until each is gone (its socket closed).
        connections.shutdown().await;
    })
}

/// The accept loop of a serving [`Server`] and the way to stop it.
#[derive(Debug)]
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// A server that can be stopped (every connection closed) and started again on the same address.
#[derive(Debug)]
pub(crate) struct Server {
    addr: SocketAddr,
    router: Router,
    running: Mutex<Option<Running>>,
}

impl Server {
    /// Binds `addr` (port 0 picks one) and serves.
    pub(crate) async fn start(addr: SocketAddr, router: Router) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let server = Server {
            addr,
            router,
            running: Mutex::new(None),
        };
        server.serve(listener);
        Ok(server)
    }

    fn serve(&self, listener: TcpListener) {
        let (stop, stopped) = oneshot::channel();
        let task = spawn_accept_loop(listener, self.router.clone(), stopped);
        *lock(&self.running) = Some(Running { stop, task });
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes every open connection; when it returns, the listener and
    /// every connection are closed, so a client's next request (pooled connection or new) fails.
    pub(crate) async fn stop(&self) {
        let running = lock(&self.running).take();
        if let Some(Running { stop, task }) = running {
            let _ = stop.send(());
            // The loop ends by itself; a panic or abort in it ends it too.
            let _ = task.await;
        }
    }

    /// [`stop`](Self::stop) where there is no async context to wait in (`Drop`): the loop is
    /// aborted and the runtime closes the sockets soon after.
    pub(crate) fn abort(&self) {
        if let Some(Running { stop, task }) = lock(&self.running).take() {
            let _ = stop.send(());
            task.abort();
        }
    }

    /// Whether it is serving.
    pub(crate) fn running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Serves again on the same address (stopping first if running). Retries the bind for a
    /// moment: the old socket may still be closing.
    pub(crate) async fn restart(&self) -> std::io::Result<()> {
        self.stop().await;
        let mut last = None;
        for _ in 0..50 {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => {
                    self.serve(listener);
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("bind failed")))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.abort();
    }
}
