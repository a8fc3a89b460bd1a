//! [`GatewayError`]: every way a gateway request can fail, and the HTTP status it maps to.
//!
//! A harness must never see a 500 for something it or the model did: bad JSON, an unknown
//! role, a prompt over the context window are 400s with a message; a failing generator is a
//! 502. Only a bug in the gateway itself is a 500.

use axum::http::StatusCode;
use uniagent_core::{Error as CoreError, ErrorKind};

/// A failed gateway request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The request body or its fields are invalid (400).
    #[error("invalid request: {message}")]
    InvalidRequest {
        /// What is wrong, for the client.
        message: String,
    },
    /// The prompt plus the requested tokens do not fit the context window (400,
    /// OpenAI's `context_length_exceeded`).
    #[error("context length exceeded: {source}")]
    ContextLength {
        /// The length-limit error of the rollout cache.
        #[source]
        source: CoreError,
    },
    /// The token generator failed (502).
    #[error("the model backend failed: {source}")]
    Model {
        /// The generator's error.
        #[source]
        source: CoreError,
    },
    /// The chat template or tokenizer could not handle the conversation (400: the messages
    /// are what the template rejects).
    #[error("the chat template rejected the conversation: {source}")]
    Template {
        /// The codec's error.
        #[source]
        source: CoreError,
    },
    /// The request names no session, or a name no session can have (400).
    #[error("invalid session id: {message}")]
    InvalidSession {
        /// What is wrong with the id.
        message: String,
    },
    /// A reward or other session-scoped call for a session the gateway has never seen (404).
    #[error("no session `{session}`: it was never opened (send a model request first)")]
    SessionNotFound {
        /// The session id.
        session: String,
    },
    /// A request for a session that has already ended: its trajectories are written, nothing
    /// more can join them (409).
    #[error("session `{session}` has ended: its trajectories are recorded")]
    SessionEnded {
        /// The session id.
        session: String,
    },
    /// The request body is larger than any conversation the context window can hold (413).
    #[error("the request body is over the limit of {limit} bytes (what a conversation filling max_model_len tokens can take; see the gateway's max_model_len)")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// Writing the session's trajectories failed (500).
    #[error("recording failed: {message}")]
    Recording {
        /// What failed.
        message: String,
    },
    /// The journal of open sessions holds a line that cannot be read back (a gateway
    /// starting on its output directory recovers from it). A torn last line, the write a
    /// kill interrupted, is not an error.
    #[error("{}, line {line}: {message}", path.display())]
    Journal {
        /// The journal file.
        path: std::path::PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// `previous_response_id` names no response this session stored (never made, made with
    /// `store: false`, evicted, or made before a restart).
    #[error("previous response `{id}` not found in this session (responses are kept per session, in memory, for those made with `store: true`)")]
    PreviousResponseNotFound {
        /// The id asked for.
        id: String,
    },
    /// A bug in the gateway (500).
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },
}

/// A cassette line that is not a gateway cassette of this version is invalid input.
impl From<uniagent_core::formats::cassettes::CassetteError> for GatewayError {
    fn from(e: uniagent_core::formats::cassettes::CassetteError) -> Self {
        Self::invalid(e.to_string())
    }
}

impl GatewayError {
    /// An invalid request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            message: message.into(),
        }
    }

    /// Classifies an error of the codec or rollout cache.
    pub fn from_codec(source: CoreError) -> Self {
        match source.kind() {
            ErrorKind::LimitExceeded => Self::ContextLength { source },
            ErrorKind::InvalidInput => Self::InvalidRequest {
                message: source.to_string(),
            },
            _ => Self::Template { source },
        }
    }

    /// Classifies an error of the token generator.
    pub fn from_model(source: CoreError) -> Self {
        match source.kind() {
            ErrorKind::LimitExceeded => Self::ContextLength { source },
            _ => Self::Model { source },
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { .. }
            | Self::InvalidSession { .. }
            | Self::ContextLength { .. }
            | Self::Template { .. }
            | Self::PreviousResponseNotFound { .. } => StatusCode::BAD_REQUEST,
            Self::SessionNotFound { .. } => StatusCode::NOT_FOUND,
            Self::SessionEnded { .. } => StatusCode::CONFLICT,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Model { .. } => StatusCode::BAD_GATEWAY,
            Self::Recording { .. } | Self::Journal { .. } | Self::Internal { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// A short machine-readable code (`invalid_request_error`, `context_length_exceeded`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. } => "invalid_request_error",
            Self::InvalidSession { .. } => "invalid_session_id",
            Self::SessionNotFound { .. } => "session_not_found",
            Self::SessionEnded { .. } => "session_ended",
            Self::BodyTooLarge { .. } => "request_too_large",
            Self::ContextLength { .. } => "context_length_exceeded",
            Self::Template { .. } => "template_error",
            Self::Model { .. } => "model_error",
            Self::Recording { .. } => "recording_error",
            Self::Journal { .. } => "journal_error",
            Self::PreviousResponseNotFound { .. } => "previous_response_not_found",
            Self::Internal { .. } => "internal_error",
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = GatewayError> = std::result::Result<T, E>;
