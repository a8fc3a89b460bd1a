//! [`RemoteRuntime`]: an async client for every endpoint of the SWE-ReX 1.4 remote-runtime
//! protocol, usable against our `uniagent-sandbox` server and against SWE-ReX's own
//! `swerex-remote`.
//!
//! What it adds over SWE-ReX's Python client:
//! - **Deadlines that fit the command.** A request carrying a command timeout gets an HTTP
//!   deadline of that timeout plus [`RemoteRuntimeOptions::timeout_margin`], so the server's
//!   `CommandTimeoutError` always arrives before the client gives up (see [`run_in_session_timeout`]).
//! - **Safe retries.** Only connection failures are retried, each logical request keeping one
//!   `X-Request-ID` so that a server which already ran it replays the answer instead of running
//!   it twice. A command is resent only after a refused connection, or when it went out on a
//!   pooled keep-alive connection that ended before any answer: the server had closed it (uvicorn
//!   closes one after every SWE-ReX 511), and the request id covers the rare rest. Deadlines, 511 exceptions and HTTP errors are never retried.
//! - **Typed errors.** HTTP 511 becomes [`Error::Runtime`] with the server's class path,
//!   connection failures a retryable [`Error::Sandbox`] (see [`decode_response`]).
//! - **Keep-alive.** One pooled HTTP client per runtime instead of a connection per request.

mod archive;
mod decode;
mod pooled;
mod timeouts;
mod transport;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use tokio::time::Instant;
use uniagent_core::sandbox::*;
use uniagent_core::{Error, Result, RetryConfig};

pub use archive::zip_directory;
pub use decode::decode_response;
pub use timeouts::{create_session_timeout, execute_timeout, run_in_session_timeout};
use transport::{Body, Transport};

/// One `is_alive` probe.
enum Probe {
    /// HTTP 200 with a body.
    Answered(IsAliveResponse),
    /// No HTTP answer (refused, reset, deadline).
    Unreachable(String),
    /// An HTTP error status (401, 404...).
    Refused(Error),
}

/// Settings of a [`RemoteRuntime`].
#[derive(Clone, PartialEq)]
pub struct RemoteRuntimeOptions {
    /// Name used in errors (`remote`, `host`...).
    pub backend: String,
    /// HTTP deadline of requests that carry no command timeout (files, sessions, close).
    pub request_timeout: Duration,
    /// Added to a command's own timeout to get its HTTP deadline.
    pub timeout_margin: Duration,
    /// Deadline of one `is_alive` probe.
    pub alive_timeout: Duration,
    /// Deadline of establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Retries of connection failures.
    pub retry: RetryConfig,
    /// Headers sent with every request, e.g. a router's `X-Sandbox-ID` and its
    /// `Authorization` (values are redacted in `Debug`).
    pub extra_headers: Vec<(String, String)>,
}

/// Header values are redacted: they may hold credentials, and options end up in logs.
impl fmt::Debug for RemoteRuntimeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.extra_headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("RemoteRuntimeOptions")
            .field("backend", &self.backend)
            .field("request_timeout", &self.request_timeout)
            .field("timeout_margin", &self.timeout_margin)
            .field("alive_timeout", &self.alive_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry", &self.retry)
            .field("extra_headers", &headers)
            .finish()
    }
}

impl Default for RemoteRuntimeOptions {
    fn default() -> Self {
        Self {
            backend: "remote".into(),
            request_timeout: Duration::from_secs(60),
            timeout_margin: Duration::from_secs(30),
            alive_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            retry: RetryConfig::default(),
            extra_headers: Vec::new(),
        }
    }
}

/// A client of one SWE-ReX-protocol server. Cheap to clone; clones share the connection pool.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use uniagent_core::sandbox::{Action, BashAction, CreateSessionRequest};
/// use uniagent_sandboxes::client::{RemoteRuntime, RemoteRuntimeOptions};
///
/// let runtime = RemoteRuntime::new("http://127.0.0.1:8000", Some("token".into()), RemoteRuntimeOptions::default())?;
/// runtime.wait_until_alive(std::time::Duration::from_secs(10)).await?;
/// runtime.create_session(&CreateSessionRequest::new("default")).await?;
/// let obs = runtime.run_in_session(&Action::Bash(BashAction::new("default", "echo hi", Some(10.0)))).await?;
/// assert_eq!(obs.output, "hi\n");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RemoteRuntime {
    transport: Arc<Transport>,
    options: Arc<RemoteRuntimeOptions>,
}

impl fmt::Debug for RemoteRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteRuntime")
            .field("url", &self.transport.base_url)
            .field("auth", &self.transport.token.as_ref().map(|_| "<redacted>"))
            .field("options", &self.options)
            .finish()
    }
}

impl RemoteRuntime {
    /// A client of the server at `url` (`http://host:port`, optionally with a path prefix).
    /// `auth_token` is sent as `X-API-Key` unless it is `None` or empty.
    pub fn new(
        url: &str,
        auth_token: Option<String>,
        options: RemoteRuntimeOptions,
    ) -> Result<Self> {
        let base_url = url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(Error::invalid_input(format!(
                "sandbox URL must start with http:// or https://, got `{url}`"
            )));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &options.extra_headers {
            let bad = |what: &str| {
                Error::invalid_input(format!("extra header `{name}`: invalid header {what}"))
            };
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad("name"))?;
            let mut value =
                reqwest::header::HeaderValue::from_str(value).map_err(|_| bad("value"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let pooled = pooled::Pooled::default();
        let http = reqwest::Client::builder()
            .connector_layer(pooled.clone())
            .default_headers(headers)
            .connect_timeout(options.connect_timeout)
            .tcp_keepalive(Duration::from_secs(15))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(4))
            .build()
            .map_err(|e| Error::Sandbox {
                backend: options.backend.clone(),
                message: format!("cannot build the HTTP client: {e}"),
                retryable: false,
                source: Some(Box::new(e)),
            })?;
        let transport = Transport {
            http,
            base_url,
            token: auth_token,
            backend: options.backend.clone(),
            retry: options.retry.clone(),
            pooled,
        };
        Ok(Self {
            transport: Arc::new(transport),
            options: Arc::new(options),
        })
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        &self.transport.base_url
    }

    /// The settings this client was built with.
    pub fn options(&self) -> &RemoteRuntimeOptions {
        &self.options
    }

    async fn post<B: Serialize, T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        deadline: Option<Duration>,
    ) -> Result<T> {
        let value = serde_json::to_value(body)
            .map_err(|e| Error::invalid_input(format!("cannot encode the {path} request: {e}")))?;
        self.transport
            .call(Method::POST, path, Body::Json(&value), deadline)
            .await
    }

    /// `GET /`: the server's greeting (`{"message": "hello world"}`).
    pub async fn hello(&self) -> Result<serde_json::Value> {
        self.transport
            .call(
                Method::GET,
                "/",
                Body::Empty,
                Some(self.options.request_timeout),
            )
            .await
    }

    /// `GET /is_alive`, with SWE-ReX's semantics: a server that cannot be reached, times out
    /// or answers an HTTP error is reported as `is_alive: false` with the reason in `message`;
    /// only a runtime exception (HTTP 511) is an `Err`.
    pub async fn is_alive(&self, timeout: Option<Duration>) -> Result<IsAliveResponse> {
        match self
            .probe(timeout.unwrap_or(self.options.alive_timeout))
            .await?
        {
            Probe::Answered(alive) => Ok(alive),
            Probe::Unreachable(message) | Probe::Refused(Error::Sandbox { message, .. }) => {
                Ok(IsAliveResponse {
                    is_alive: false,
                    message,
                })
            }
            Probe::Refused(e) => Ok(IsAliveResponse {
                is_alive: false,
                message: e.to_string(),
            }),
        }
    }

    async fn probe(&self, deadline: Duration) -> Result<Probe> {
        let id = transport::request_id();
        let (status, body) = match self
            .transport
            .exchange(Method::GET, "/is_alive", &Body::Empty, Some(deadline), &id)
            .await
        {
            Ok(answer) => answer,
            Err(e) => return Ok(Probe::Unreachable(Error::from(e).to_string())),
        };
        match decode_response::<IsAliveResponse>(&self.transport.backend, status, &body) {
            Ok(alive) => Ok(Probe::Answered(alive)),
            Err(e @ Error::Runtime { .. }) => Err(e),
            Err(e) => Ok(Probe::Refused(e)),
        }
    }

    /// Polls `GET /is_alive` until it answers true, with a short exponential backoff (1 ms
    /// doubling up to 100 ms), or fails with [`Error::Timeout`] quoting the last answer. A
    /// server that answers with an HTTP error (a rejected token) fails at once with that error.
    pub async fn wait_until_alive(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let remaining = timeout.saturating_sub(start.elapsed());
            let deadline = remaining.clamp(Duration::from_millis(50), self.options.alive_timeout);
            let last = match self.probe(deadline).await? {
                Probe::Answered(alive) if alive.is_alive => return Ok(()),
                Probe::Answered(alive) => alive.message,
                Probe::Unreachable(message) => message,
                Probe::Refused(e) => return Err(e),
            };
            if start.elapsed() + pause >= timeout {
                return Err(Error::Timeout {
                    operation: format!(
                        "waiting for {} to be alive (last answer: {last})",
                        self.url()
                    ),
                    after: timeout,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// `POST /create_session`.
    pub async fn create_session(
        &self,
        request: &CreateSessionRequest,
    ) -> Result<CreateSessionResponse> {
        let deadline = create_session_timeout(request, self.options.timeout_margin);
        self.post("/create_session", request, deadline).await
    }

    /// `POST /run_in_session`: a command or an interrupt. The HTTP deadline is the action's own
    /// timeout plus the margin; an action without a timeout has no HTTP deadline.
    pub async fn run_in_session(&self, action: &Action) -> Result<BashObservation> {
        let deadline = run_in_session_timeout(action, self.options.timeout_margin);
        self.post("/run_in_session", action, deadline).await
    }

    /// `POST /close_session`.
    pub async fn close_session(
        &self,
        request: &CloseSessionRequest,
    ) -> Result<CloseSessionResponse> {
        self.post(
            "/close_session",
            request,
            Some(self.options.request_timeout),
        )
        .await
    }

    /// `POST /execute`. The HTTP deadline is the command's timeout plus the margin.
    pub async fn execute(&self, command: &Command) -> Result<CommandResponse> {
        let deadline = execute_timeout(command, self.options.timeout_margin);
        self.post("/execute", command, deadline).await
    }

    /// `POST /read_file`.
    pub async fn read_file(&self, request: &ReadFileRequest) -> Result<ReadFileResponse> {
        self.post("/read_file", request, Some(self.options.request_timeout))
            .await
    }

    /// `POST /write_file`.
    pub async fn write_file(&self, request: &WriteFileRequest) -> Result<()> {
        let _: serde_json::Value = self
            .post("/write_file", request, Some(self.options.request_timeout))
            .await?;
        Ok(())
    }

    /// `POST /upload` (multipart: `file`, `target_path`, `unzip`). With `unzip`, `data` must be
    /// a zip archive, extracted *into* `target_path`.
    pub async fn upload(&self, request: UploadRequest) -> Result<()> {
        let file_name = if request.unzip {
            "zipped_transfer.zip"
        } else {
            "file_transfer"
        };
        let body = Body::Upload {
            data: bytes::Bytes::from(request.data),
            file_name,
            target_path: &request.target_path,
            unzip: request.unzip,
        };
        let _: serde_json::Value = self
            .transport
            .call(
                Method::POST,
                "/upload",
                body,
                Some(self.options.request_timeout),
            )
            .await?;
        Ok(())
    }

    /// Uploads a local file, or a local directory (zipped here, extracted there), to
    /// `target_path`, as SWE-ReX's `RemoteRuntime.upload` does.
    pub async fn upload_path(&self, source: &Path, target_path: &str) -> Result<()> {
        let source = source.to_path_buf();
        let meta = tokio::fs::metadata(&source)
            .await
            .map_err(|e| Error::io(format!("reading {}", source.display()), e))?;
        let request = if meta.is_dir() {
            let data = tokio::task::spawn_blocking(move || zip_directory(&source))
                .await
                .map_err(|e| Error::internal(format!("zipping task failed: {e}")))??;
            UploadRequest {
                data,
                target_path: target_path.to_owned(),
                unzip: true,
            }
        } else {
            let data = tokio::fs::read(&source)
                .await
                .map_err(|e| Error::io(format!("reading {}", source.display()), e))?;
            UploadRequest {
                data,
                target_path: target_path.to_owned(),
                unzip: false,
            }
        };
        self.upload(request).await
    }

    /// `POST /close`: closes every session; the server keeps running.
    pub async fn close(&self) -> Result<()> {
        let _: serde_json::Value = self
            .transport
            .call(
                Method::POST,
                "/close",
                Body::Empty,
                Some(self.options.request_timeout),
            )
            .await?;
        Ok(())
    }
}
