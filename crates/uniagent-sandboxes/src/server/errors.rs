//! How the server reports failures, in SWE-ReX's wire shapes: HTTP 511 with a `swerexception`
//! payload for runtime errors (the Python client re-raises the class named by `class_path`),
//! 422 with FastAPI's `detail` list for invalid bodies, and `{"detail": ...}` for HTTP errors.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use uniagent_core::sandbox::{ExceptionPayload, RemoteException};

use super::pyfmt::py_repr;

/// The status SWE-ReX uses for exceptions raised by the runtime ("Network Authentication
/// Required", re-used as a private code).
pub(crate) const EXCEPTION_STATUS: u16 = 511;

/// Python class paths the server raises, as SWE-ReX 1.4 names them.
pub(crate) mod class {
    /// Session command or `execute` ran past its timeout.
    pub(crate) const COMMAND_TIMEOUT: &str = "swerex.exceptions.CommandTimeoutError";
    /// Non-zero exit code with `check`.
    pub(crate) const NON_ZERO_EXIT: &str = "swerex.exceptions.NonZeroExitCodeError";
    /// `bash -n` rejected the command.
    pub(crate) const BASH_SYNTAX: &str = "swerex.exceptions.BashIncorrectSyntaxError";
    /// `create_session` with a name that is taken.
    pub(crate) const SESSION_EXISTS: &str = "swerex.exceptions.SessionExistsError";
    /// A session name that is not registered.
    pub(crate) const SESSION_MISSING: &str = "swerex.exceptions.SessionDoesNotExistError";
    /// No prompt within the allowed time (session start, interrupt).
    pub(crate) const PEXPECT_TIMEOUT: &str = "pexpect.exceptions.TIMEOUT";
    /// The session's shell exited.
    pub(crate) const PEXPECT_EOF: &str = "pexpect.exceptions.EOF";
    /// A session whose shell was closed by `/close`.
    pub(crate) const RUNTIME_ERROR: &str = "builtins.RuntimeError";
    /// An unknown text encoding.
    pub(crate) const LOOKUP_ERROR: &str = "builtins.LookupError";
    /// Text that is not valid in the requested encoding.
    pub(crate) const UNICODE_DECODE: &str = "builtins.UnicodeDecodeError";
    /// `/upload` with `unzip` and a body that is not a zip archive.
    pub(crate) const BAD_ZIP: &str = "zipfile.BadZipFile";
    /// `/upload` with `unzip` and an archive beyond the extraction budgets.
    pub(crate) const LARGE_ZIP: &str = "zipfile.LargeZipFile";
    /// An `expect` pattern that is not a valid regular expression.
    pub(crate) const REGEX_ERROR: &str = "re.error";
    /// Any other operating-system error.
    pub(crate) const OS_ERROR: &str = "builtins.OSError";
}

/// A failure while handling one request.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerError {
    /// A runtime exception: HTTP 511 with a `swerexception` body (boxed: keeps results small).
    Exception(Box<RemoteException>),
    /// The body failed validation: HTTP 422 with FastAPI's `{"detail": [...]}`.
    Validation(Vec<Value>),
    /// A plain HTTP error: `{"detail": "..."}`.
    Http {
        /// The status code.
        status: StatusCode,
        /// The `detail` text.
        detail: String,
    },
}

impl ServerError {
    /// A runtime exception of Python class `class_path`.
    pub fn exception(class_path: &str, message: impl Into<String>) -> Self {
        Self::Exception(Box::new(RemoteException {
            message: message.into(),
            class_path: class_path.to_owned(),
            traceback: String::new(),
            extra_info: Map::new(),
        }))
    }

    /// Like [`ServerError::exception`], with `extra_info`.
    pub fn exception_with(
        class_path: &str,
        message: impl Into<String>,
        extra_info: Map<String, Value>,
    ) -> Self {
        Self::Exception(Box::new(RemoteException {
            message: message.into(),
            class_path: class_path.to_owned(),
            traceback: String::new(),
            extra_info,
        }))
    }

    /// An operating-system error on `path`, as Python's `OSError` subclasses print it:
    /// `[Errno 2] No such file or directory: 'x'` with class `builtins.FileNotFoundError`.
    pub fn os_error(err: &std::io::Error, path: &str) -> Self {
        let Some(code) = err.raw_os_error() else {
            return Self::exception(class::OS_ERROR, err.to_string());
        };
        let errno = nix::errno::Errno::from_raw(code);
        let class_path = match errno {
            nix::errno::Errno::ENOENT => "builtins.FileNotFoundError",
            nix::errno::Errno::EISDIR => "builtins.IsADirectoryError",
            nix::errno::Errno::ENOTDIR => "builtins.NotADirectoryError",
            nix::errno::Errno::EACCES | nix::errno::Errno::EPERM => "builtins.PermissionError",
            nix::errno::Errno::EEXIST => "builtins.FileExistsError",
            _ => class::OS_ERROR,
        };
        Self::exception(
            class_path,
            format!("[Errno {code}] {}: {}", errno.desc(), py_repr(path)),
        )
    }

    /// A one-item 422 answer.
    pub fn invalid(item: Value) -> Self {
        Self::Validation(vec![item])
    }

    /// The Python class path, for exceptions.
    pub fn class_path(&self) -> Option<&str> {
        match self {
            Self::Exception(e) => Some(&e.class_path),
            _ => None,
        }
    }

    /// Whether the answer may be stored in the `X-Request-ID` replay cache: SWE-ReX stores every
    /// answer that did not come from an exception.
    pub fn is_cacheable(&self) -> bool {
        !matches!(self, Self::Exception(_))
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exception(e) => write!(f, "{}: {}", e.class_path, e.message),
            Self::Validation(items) => write!(f, "{} validation error(s)", items.len()),
            Self::Http { status, detail } => write!(f, "{status}: {detail}"),
        }
    }
}

impl std::error::Error for ServerError {}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        match self {
            Self::Exception(e) => {
                let status = StatusCode::from_u16(EXCEPTION_STATUS)
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut response =
                    (status, axum::Json(ExceptionPayload { swerexception: *e })).into_response();
                response.extensions_mut().insert(NotCacheable);
                response
            }
            Self::Validation(mut items) => {
                for item in &mut items {
                    if let Some(input) = item.get_mut("input") {
                        cap_echo(input);
                    }
                }
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    axum::Json(json!({ "detail": items })),
                )
                    .into_response()
            }
            Self::Http { status, detail } => {
                (status, axum::Json(json!({ "detail": detail }))).into_response()
            }
        }
    }
}

/// The most bytes of a request that a 422 answer echoes back.
pub(crate) const MAX_ECHO_BYTES: usize = 4096;

/// Shrinks an echoed input to about [`MAX_ECHO_BYTES`]: FastAPI echoes the whole input, which
/// for a 60 MB body means a 60 MB error. Small inputs are echoed unchanged.
fn cap_echo(input: &mut Value) {
    let encoded = input.to_string();
    if encoded.len() > MAX_ECHO_BYTES {
        *input = Value::String(crate::server::session::shorten(&encoded, MAX_ECHO_BYTES));
    }
}

/// Marks a response that must not enter the replay cache (exceptions, auth failures).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NotCacheable;

/// The 401 answers of SWE-ReX's `X-API-Key` check.
pub(crate) fn unauthorized(missing: bool) -> Response {
    let detail = if missing {
        "Not authenticated"
    } else {
        "Invalid API Key"
    };
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({ "detail": detail })),
    )
        .into_response();
    if missing {
        response
            .headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("APIKey"));
    }
    response.extensions_mut().insert(NotCacheable);
    response
}
