//! The sandbox server: SWE-ReX 1.4's remote-runtime HTTP protocol, served by axum.
//!
//! Every endpoint of `swerex-remote` with the same JSON shapes, `X-API-Key` authentication
//! (constant-time compare), HTTP 511 exception payloads with SWE-ReX's Python class paths,
//! FastAPI-shaped 422 validation errors, an `X-Request-ID` replay cache and multipart upload with
//! unzip. Bash sessions are event-driven ([`session`]); requests on different sessions run in
//! parallel. `SERVER.md` in this crate lists every deviation from SWE-ReX.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use uniagent_envs::server::{serve, ServerConfig};
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("listening on {}", listener.local_addr()?);
//! serve(listener, ServerConfig::new("secret-token"), std::future::pending()).await
//! # }
//! ```

mod app;
pub mod errors;
pub mod execute;
pub mod files;
pub mod pyfmt;
pub mod replay;
pub mod session;
pub mod upload;
pub mod validate;

use std::future::Future;

pub use app::{router, AppState};
pub use errors::ServerError;
pub use session::{SessionManager, ShellOptions};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The `X-API-Key` value clients must send; empty turns authentication off (as SWE-ReX).
    pub auth_token: String,
    /// Bash session settings (also the output limit of `/execute`).
    pub shell: ShellOptions,
    /// Answers kept by the `X-Request-ID` replay cache.
    pub replay_entries: usize,
    /// Body bytes kept by the replay cache.
    pub replay_bytes: usize,
}

impl ServerConfig {
    /// Defaults with the given token.
    pub fn new(auth_token: impl Into<String>) -> Self {
        Self {
            auth_token: auth_token.into(),
            shell: ShellOptions::default(),
            replay_entries: 1024,
            replay_bytes: 64 << 20,
        }
    }
}

/// Serves the protocol on `listener` until `shutdown` resolves, then closes every session.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (app, state) = router(config);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    state.sessions.shutdown().await;
    result
}
