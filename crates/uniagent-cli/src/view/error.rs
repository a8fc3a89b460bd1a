//! [`ViewError`]: what a viewer route can answer instead of data, as a JSON body
//! `{"error": "..."}` with a 4xx/5xx status (never a dropped connection).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answer of the viewer's JSON routes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    /// A query parameter is unknown or has a bad value (400).
    #[error("query parameter `{key}`: {message}")]
    BadQuery {
        /// The parameter.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A run or trajectory id in the path is not a number (400).
    #[error("bad path: {0}")]
    BadPath(String),
    /// No such run or trajectory (404).
    #[error("{0}")]
    NotFound(String),
    /// Reading a run's files failed (500, with the file named).
    #[error("{0}")]
    Io(String),
}

impl ViewError {
    /// A bad query parameter.
    pub fn bad_query(key: &str, message: impl Into<String>) -> Self {
        Self::BadQuery {
            key: key.to_owned(),
            message: message.into(),
        }
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadQuery { .. } | Self::BadPath(_) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ViewError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.to_string() });
        (self.status(), Json(body)).into_response()
    }
}
