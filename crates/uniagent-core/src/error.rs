//! The one error type of `uniagent-core`, shared by the four core traits.
//!
//! Backends keep their own error enums (with richer context) and convert into [`Error`] at the
//! trait boundary. Whether an error is worth retrying is decided here, in [`Error::kind`],
//! [`Error::is_retryable`] and, for HTTP answers, [`retryable_http_status`], and nowhere else.

use std::time::Duration;

use crate::sandbox::ExceptionClass;

/// An error and its causes on one line, `outer: inner: innermost` (HTTP clients' own messages
/// hide the OS error underneath).
///
/// ```
/// let io = std::io::Error::new(std::io::ErrorKind::Other, "reset by peer");
/// let e = uniagent_core::Error::io("reading the answer", io);
/// assert!(uniagent_core::error_chain(&e).ends_with(": reset by peer"));
/// ```
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether a request answered with HTTP `status` may succeed if sent again.
///
/// `429`, `502` and `503` say the request was refused before it ran: always worth a retry.
/// `408`, `500` and `504` leave open whether it ran, so they are retried only when running it
/// twice is harmless (`idempotent`: a model generation is, a sandbox command is not). Anything
/// else answers the same again.
///
/// ```
/// use uniagent_core::retryable_http_status;
/// assert!(retryable_http_status(503, false));
/// assert!(retryable_http_status(504, true));
/// assert!(!retryable_http_status(504, false));
/// assert!(!retryable_http_status(501, true));
/// ```
pub fn retryable_http_status(status: u16, idempotent: bool) -> bool {
    match status {
        429 | 502 | 503 => true,
        408 | 500 | 504 => idempotent,
        _ => false,
    }
}

/// Convenience alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error source from another crate.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The broad class of an [`Error`]; what callers branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller passed something malformed (bad arguments, bad JSON, bad template input).
    InvalidInput,
    /// A configuration file or value is wrong, or needs a cargo feature that is off.
    Config,
    /// The backend does not support this operation (see its capabilities).
    NotSupported,
    /// A named thing (session, file, model, sandbox) does not exist.
    NotFound,
    /// A length or resource limit would be exceeded; checked before the expensive call.
    LimitExceeded,
    /// An operation ran past its deadline.
    Timeout,
    /// A service could not be reached or answered with a transient failure (connection refused,
    /// reset, HTTP 429/502/503/504). Retrying may help.
    Unavailable,
    /// The peer answered, but with something that breaks the protocol or contract.
    Protocol,
    /// A command or file operation inside the sandbox raised (non-zero exit with `check`,
    /// bad syntax, a session that exists already...).
    CommandFailed,
    /// The operation was cancelled by the caller.
    Cancelled,
    /// A bug or an unexpected state inside uniagent or a backend.
    Internal,
}

/// Errors of the core traits and types.
///
/// Agent-visible failures (a command's non-zero exit code, a tool that failed, a malformed tool
/// call) are **not** errors: they are data the model reads. `Err` means infrastructure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Malformed input from the caller.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What was wrong.
        message: String,
    },
    /// A configuration problem.
    #[error("configuration error: {message}")]
    Config {
        /// What was wrong, naming the offending key where known.
        message: String,
        /// The underlying parse error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// A backend was selected whose cargo feature is not compiled in.
    #[error("backend `{backend}` needs the cargo feature `{feature}` of `{krate}`, which is not enabled")]
    FeatureDisabled {
        /// The backend name as written in the configuration.
        backend: String,
        /// The cargo feature to enable.
        feature: String,
        /// The crate that owns the feature.
        krate: String,
    },
    /// The backend cannot do this.
    #[error("`{operation}` is not supported by {backend}")]
    NotSupported {
        /// The operation that was attempted.
        operation: String,
        /// The backend that refused it.
        backend: String,
    },
    /// Something named does not exist.
    #[error("{what} not found: {name}")]
    NotFound {
        /// The kind of thing (session, file, ...).
        what: String,
        /// Its name.
        name: String,
    },
    /// A length limit would be exceeded; raised before the model is called.
    #[error("length limit `{limit}` exceeded: {needed} tokens needed, {allowed} allowed")]
    LengthLimit {
        /// Which limit (`max_prompt_len`, `max_response_len`, `max_model_len`).
        limit: LengthLimitKind,
        /// Tokens the operation would need.
        needed: usize,
        /// Tokens the limit allows.
        allowed: usize,
    },
    /// An operation timed out.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What timed out.
        operation: String,
        /// The deadline that passed.
        after: Duration,
    },
    /// A model backend failed.
    #[error("model backend `{backend}` failed: {message}")]
    Model {
        /// Backend name (e.g. `vllm`, `openai`, `scripted`).
        backend: String,
        /// Human-readable description.
        message: String,
        /// Whether retrying the same request may succeed.
        retryable: bool,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A sandbox (deployment) failed.
    #[error("sandbox `{backend}` failed: {message}")]
    Sandbox {
        /// Backend name (e.g. `host`, `docker`, `remote`).
        backend: String,
        /// Human-readable description.
        message: String,
        /// Whether retrying the same request may succeed.
        retryable: bool,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A reward computation failed (not "the answer was wrong": that is a score of 0).
    #[error("reward `{reward}` failed: {message}")]
    Reward {
        /// The reward spec's name.
        reward: String,
        /// Human-readable description.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A chat template or tokenizer failed.
    #[error("codec error: {message}")]
    Codec {
        /// Human-readable description.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The peer violated the protocol.
    #[error("protocol error: {message}")]
    Protocol {
        /// Human-readable description.
        message: String,
    },
    /// The sandbox runtime raised an exception (HTTP 511 in SWE-ReX's protocol).
    #[error("sandbox `{backend}` raised {}: {}", exception.class_path, exception.message)]
    Runtime {
        /// Backend name.
        backend: String,
        /// The exception, with SWE-ReX's class path (boxed to keep `Error` small).
        exception: Box<crate::sandbox::RemoteException>,
    },
    /// Retrying did not help; carries the last error.
    #[error("gave up after {attempts} attempts over {elapsed:?}: {last}")]
    RetriesExhausted {
        /// Attempts made, including the first.
        attempts: u32,
        /// Time spent from the first attempt.
        elapsed: Duration,
        /// The error of the last attempt.
        #[source]
        last: Box<Error>,
    },
    /// The caller cancelled.
    #[error("cancelled: {reason}")]
    Cancelled {
        /// Why (e.g. `ctrl-c`, `batch aborted`).
        reason: String,
    },
    /// File-system or pipe failure.
    #[error("i/o error while {context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A bug or unexpected state.
    #[error("internal error: {message}")]
    Internal {
        /// Human-readable description.
        message: String,
    },
}

/// Which length limit an [`Error::LengthLimit`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthLimitKind {
    /// Tokens of the initial prompt.
    MaxPromptLen,
    /// Tokens after the prompt (sampled and inserted).
    MaxResponseLen,
    /// Prompt plus response: the model's context window.
    MaxModelLen,
}

impl std::fmt::Display for LengthLimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::MaxPromptLen => "max_prompt_len",
            Self::MaxResponseLen => "max_response_len",
            Self::MaxModelLen => "max_model_len",
        })
    }
}

impl Error {
    /// The broad class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidInput { .. } | Self::Codec { .. } => ErrorKind::InvalidInput,
            Self::Config { .. } | Self::FeatureDisabled { .. } => ErrorKind::Config,
            Self::NotSupported { .. } => ErrorKind::NotSupported,
            Self::NotFound { .. } => ErrorKind::NotFound,
            Self::LengthLimit { .. } => ErrorKind::LimitExceeded,
            Self::Timeout { .. } => ErrorKind::Timeout,
            Self::Model { retryable, .. } | Self::Sandbox { retryable, .. } => {
                if *retryable {
                    ErrorKind::Unavailable
                } else {
                    ErrorKind::Internal
                }
            }
            Self::Reward { .. } | Self::Internal { .. } => ErrorKind::Internal,
            Self::Protocol { .. } => ErrorKind::Protocol,
            Self::Runtime { exception, .. } => match exception.class() {
                ExceptionClass::CommandTimeout => ErrorKind::Timeout,
                ExceptionClass::SessionDoesNotExist | ExceptionClass::FileNotFound => {
                    ErrorKind::NotFound
                }
                _ => ErrorKind::CommandFailed,
            },
            Self::RetriesExhausted { last, .. } => last.kind(),
            Self::Cancelled { .. } => ErrorKind::Cancelled,
            Self::Io { .. } => ErrorKind::Internal,
        }
    }

    /// Whether the same request may succeed if sent again.
    ///
    /// Only transient transport failures are retryable. A timeout is not: the operation may have
    /// had effects (a command ran), so repeating it is the caller's decision.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Model { retryable, .. } | Self::Sandbox { retryable, .. } => *retryable,
            // Exhausted retries must not be retried again by an outer layer.
            _ => false,
        }
    }

    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::InvalidInput {
            message: message.into(),
        }
    }

    /// Shorthand for [`Error::Runtime`].
    pub fn runtime(backend: impl Into<String>, exception: crate::sandbox::RemoteException) -> Self {
        Self::Runtime {
            backend: backend.into(),
            exception: Box::new(exception),
        }
    }

    /// Shorthand for [`Error::Config`] without a source.
    ///
    /// ```
    /// let e = uniagent_core::Error::config("batch_size must be positive");
    /// assert_eq!(e.kind(), uniagent_core::ErrorKind::Config);
    /// ```
    pub fn config(message: impl Into<String>) -> Self {
        Self::Config {
            message: message.into(),
            source: None,
        }
    }

    /// Shorthand for [`Error::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::Internal {
            message: message.into(),
        }
    }

    /// Shorthand for [`Error::NotSupported`].
    pub fn not_supported(operation: impl Into<String>, backend: impl Into<String>) -> Self {
        Self::NotSupported {
            operation: operation.into(),
            backend: backend.into(),
        }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryability_is_decided_by_variant() {
        let transient = Error::Sandbox {
            backend: "remote".into(),
            message: "connection refused".into(),
            retryable: true,
            source: None,
        };
        assert!(transient.is_retryable());
        assert_eq!(transient.kind(), ErrorKind::Unavailable);
        let exhausted = Error::RetriesExhausted {
            attempts: 3,
            elapsed: Duration::from_secs(1),
            last: Box::new(transient),
        };
        assert!(!exhausted.is_retryable());
        assert_eq!(exhausted.kind(), ErrorKind::Unavailable);
        let timeout = Error::Timeout {
            operation: "exec".into(),
            after: Duration::from_secs(2),
        };
        assert!(!timeout.is_retryable());
        assert_eq!(timeout.kind(), ErrorKind::Timeout);
    }

    #[test]
    fn feature_disabled_names_the_feature() {
        let e = Error::FeatureDisabled {
            backend: "docker".into(),
            feature: "docker".into(),
            krate: "uniagent-sandboxes".into(),
        };
        assert!(e.to_string().contains("cargo feature `docker`"));
        assert_eq!(e.kind(), ErrorKind::Config);
    }
}
