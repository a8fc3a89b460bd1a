//! [`serve`]: the accept loop every uniagent server uses.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Limits of one server: how many clients it serves at once and how long they may take.
///
/// ```
/// use std::time::Duration;
/// use uniagent_http::ServeLimits;
/// let limits = ServeLimits { max_connections: 64, ..ServeLimits::default() };
/// assert_eq!(limits.header_timeout, Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Client connections served at once; more wait in the listen backlog (a slowloris client
    /// holds one slot until its header deadline, never more).
    pub max_connections: usize,
    /// How long a client may take to send a request's headers (the connection is closed after).
    pub header_timeout: Duration,
    /// How long requests in progress may run on after shutdown begins; the rest are cancelled
    /// (their futures dropped), so a shutdown always ends within this bound.
    pub shutdown_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Serves `app` on `listener` (HTTP/1.1) within `limits` until `shutdown` resolves.
///
/// Then the listener is closed, requests in progress get `limits.shutdown_grace` to finish, and
/// whatever still runs is cancelled: the call returns within that grace (plus the time the
/// cancelled futures take to drop), whatever the clients do.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use axum::{routing::get, Router};
/// let app = Router::new().route("/", get(|| async { "hi" }));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let stop = async { let _ = stopped.await; };
/// uniagent_http::serve(listener, app, uniagent_http::ServeLimits::default(), stop).await
/// # }
/// ```
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Reap finished connections so the set stays as small as the open ones.
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_timeout);
        let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "{} connection(s) still busy after {:?}: cancelling them",
            connections.len(),
            limits.shutdown_grace
        );
    }
    connections.shutdown().await;
    Ok(())
}
