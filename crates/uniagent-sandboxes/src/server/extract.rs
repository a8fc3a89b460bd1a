//! [`SweRexBody`]: the typed body of a JSON route, read and validated as SWE-ReX's FastAPI
//! server does, so each handler starts from its request type.
//!
//! The order of checks is FastAPI's: 415 for a content type that is not JSON (a missing one is
//! read as JSON; a cross-site "simple" request from a browser always carries a non-JSON one),
//! 413 above the route's body limit, then 422 with pydantic's error items for a body that is
//! not valid JSON or does not fit the model.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use uniagent_core::sandbox::{
    Action, CloseSessionRequest, Command, CreateSessionRequest, ReadFileRequest, WriteFileRequest,
};
use uniagent_http::is_json_content_type;

use super::errors::ServerError;
use super::validate::{
    parse_body, Model, ACTION, CLOSE_SESSION, COMMAND, CREATE_SESSION, READ_FILE, WRITE_FILE,
};

/// A request type of the protocol and the model its body is validated against.
pub(crate) trait Validated: serde::de::DeserializeOwned {
    /// The pydantic model SWE-ReX validates this body with.
    const MODEL: &'static Model;
}

impl Validated for CreateSessionRequest {
    const MODEL: &'static Model = &CREATE_SESSION;
}

impl Validated for CloseSessionRequest {
    const MODEL: &'static Model = &CLOSE_SESSION;
}

impl Validated for Action {
    const MODEL: &'static Model = &ACTION;
}

impl Validated for Command {
    const MODEL: &'static Model = &COMMAND;
}

impl Validated for ReadFileRequest {
    const MODEL: &'static Model = &READ_FILE;
}

impl Validated for WriteFileRequest {
    const MODEL: &'static Model = &WRITE_FILE;
}

/// A JSON body validated into `T`; the rejection is the [`ServerError`] SWE-ReX answers.
#[derive(Debug)]
pub(crate) struct SweRexBody<T>(pub(crate) T);

impl<S: Send + Sync, T: Validated> FromRequest<S> for SweRexBody<T> {
    type Rejection = ServerError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(kind) = request.headers().get(header::CONTENT_TYPE) {
            if !is_json_content_type(kind.to_str().unwrap_or("")) {
                return Err(ServerError::Http {
                    status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    detail: "Unsupported Media Type: send application/json".into(),
                });
            }
        }
        let body =
            Bytes::from_request(request, state)
                .await
                .map_err(|rejection| match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => ServerError::Http {
                        status: StatusCode::PAYLOAD_TOO_LARGE,
                        detail: "Request body too large".into(),
                    },
                    status => ServerError::Http {
                        status,
                        detail: rejection.body_text(),
                    },
                })?;
        parse_body(&body, T::MODEL).map(SweRexBody)
    }
}
