//! Serving an axum router so that stopping it also ends every open connection (a watch stream
//! included), which `axum::serve` does not do: each connection runs in a task of a `JoinSet`
//! owned by the accept loop, so aborting the loop drops them all.

use std::net::SocketAddr;
use std::sync::Mutex;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use super::util::lock;

/// Accepts connections on `listener` and serves `router` on each (HTTP/1.1).
fn spawn_accept_loop(listener: TcpListener, router: Router) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
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
    })
}

/// A server that can be stopped (every connection closed) and started again on the same address.
#[derive(Debug)]
pub(crate) struct Server {
    addr: SocketAddr,
    router: Router,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Server {
    /// Binds `addr` (port 0 picks one) and serves.
    pub(crate) async fn start(addr: SocketAddr, router: Router) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = spawn_accept_loop(listener, router.clone());
        Ok(Server {
            addr,
            router,
            task: Mutex::new(Some(task)),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes every open connection.
    pub(crate) fn stop(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }

    /// Whether it is serving.
    pub(crate) fn running(&self) -> bool {
        lock(&self.task).is_some()
    }

    /// Serves again on the same address (stopping first if running). Retries the bind for a
    /// moment: the old socket may still be closing.
    pub(crate) async fn restart(&self) -> std::io::Result<()> {
        self.stop();
        let mut last = None;
        for _ in 0..50 {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => {
                    let task = spawn_accept_loop(listener, self.router.clone());
                    *lock(&self.task) = Some(task);
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
        self.stop();
    }
}
