//! The sandbox server: SWE-ReX 1.4's remote-runtime HTTP protocol, served by axum.
//!
//! Every endpoint of `swerex-remote` with the same JSON shapes, `X-API-Key` authentication
//! (constant-time compare), HTTP 511 exception payloads with SWE-ReX's Python class paths,
//! FastAPI-shaped 422 validation errors, an `X-Request-ID` replay cache and multipart upload with
//! unzip. Bash sessions are event-driven ([`SessionManager`]); requests on different sessions run in
//! parallel. `SERVER.md` in this crate lists every deviation from SWE-ReX.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use uniagent_sandboxes::server::{serve, ServerConfig};
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("listening on {}", listener.local_addr()?);
//! serve(listener, ServerConfig::new("secret-token"), std::future::pending()).await
//! # }
//! ```

// Private: the public API is re-exported below; `crate::fuzzing` exposes what the fuzz targets
// drive directly.
mod app;
mod errors;
mod execute;
mod extract;
mod files;
mod limits;
mod pyfmt;
mod replay;
mod session;
mod unzip;
mod upload;
mod validate;

use std::future::Future;
use std::sync::Arc;

use crate::signed_token::Verifier;

pub use app::{router, AppState};
pub use errors::ServerError;
pub use limits::{seconds, ServerLimits, MAX_TIMEOUT};
pub use session::{SessionManager, ShellOptions};
pub use unzip::UnzipLimits;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The `X-API-Key` value clients must send. Empty is refused unless `insecure_no_auth` or
    /// `signed_tokens` is set.
    pub auth_token: String,
    /// Also accept, as `X-API-Key`, tokens this verifier accepts: per-sandbox signed tokens
    /// naming this server ([`crate::signed_token`]). With an empty `auth_token` they are the
    /// only credential.
    pub signed_tokens: Option<Arc<Verifier>>,
    /// Serve without authentication when `auth_token` is empty (SWE-ReX's behaviour for an
    /// empty token); only `Host` and `Origin` checks then stand between a web page and a shell.
    pub insecure_no_auth: bool,
    /// Bash session settings (also the output limit of `/execute`).
    pub shell: ShellOptions,
    /// Answers kept by the `X-Request-ID` replay cache.
    pub replay_entries: usize,
    /// Body bytes kept by the replay cache.
    pub replay_bytes: usize,
    /// Request, upload and extraction limits.
    pub limits: ServerLimits,
}

impl ServerConfig {
    /// Defaults with the given token.
    pub fn new(auth_token: impl Into<String>) -> Self {
        Self {
            auth_token: auth_token.into(),
            signed_tokens: None,
            insecure_no_auth: false,
            shell: ShellOptions::default(),
            replay_entries: 1024,
            replay_bytes: 64 << 20,
            limits: ServerLimits::default(),
        }
    }
}

/// The scratch directory to use: a new private one for an empty path; a given one is created
/// (0700) when missing, and refused when it is a symlink, is owned by another user or is open
/// to group or others (a predictable path in `/tmp` could be prepared by someone else).
pub fn prepare_scratch_dir(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if dir.as_os_str().is_empty() {
        use std::os::unix::fs::PermissionsExt;
        return Ok(tempfile::Builder::new()
            .prefix("uniagent-sandbox-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?
            .keep());
    }
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        Err(e) => return Err(e),
        Ok(meta) => {
            let refuse = |why: &str| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("scratch directory {}: {why}", dir.display()),
                ))
            };
            if !meta.is_dir() {
                return refuse("not a directory (or a symlink)");
            }
            // `/proc/self` belongs to this process's effective user.
            let me = std::fs::metadata("/proc/self")?.uid();
            if meta.uid() != me {
                return refuse("owned by another user");
            }
            if meta.mode() & 0o077 != 0 {
                return refuse("open to group or others (needs mode 0700)");
            }
        }
    }
    Ok(dir.to_path_buf())
}

/// Serves the protocol on `listener` until `shutdown` resolves, then closes every session.
///
/// HTTP/1.1 with at most `limits.max_connections` connections at once (further clients wait in
/// the listen backlog) and `limits.header_timeout` to send a request's headers. An empty token
/// is refused unless `signed_tokens` or `insecure_no_auth` is set.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if config.auth_token.is_empty() && config.signed_tokens.is_none() && !config.insecure_no_auth {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an empty auth token is refused; pass a token, or insecure_no_auth to serve without one",
        ));
    }
    let mut config = config;
    config.shell.scratch_dir = prepare_scratch_dir(&config.shell.scratch_dir)?;
    let limits = config.limits;
    let (app, state) = router(config);
    let serve_limits = uniagent_http::ServeLimits {
        max_connections: limits.max_connections,
        header_timeout: limits.header_timeout,
        // Requests in progress finish (bounded: sessions are killed next in any case).
        shutdown_grace: std::time::Duration::from_secs(5),
    };
    uniagent_http::serve(listener, app, serve_limits, shutdown).await?;
    state.sessions.shutdown().await;
    Ok(())
}

/// What [`crate::fuzzing`] re-exports.
pub(crate) mod fuzzing {
    pub use super::execute::execute;
    pub use super::session::{
        clean_output, truncation_note, ExpectSearch, OutputBuffer, PromptMarker,
    };
    pub use super::unzip::extract;
    pub use super::upload::read_form;
    pub use super::validate::{
        parse_body, ACTION, CLOSE_SESSION, COMMAND, CREATE_SESSION, READ_FILE, WRITE_FILE,
    };
}
