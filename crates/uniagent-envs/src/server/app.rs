//! The axum application: routes, authentication, the replay cache and the handlers.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Multipart, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use uniagent_core::sandbox::{
    Action, CloseSessionRequest, Command, CreateSessionRequest, ReadFileRequest, WriteFileRequest,
};

use super::errors::{unauthorized, NotCacheable, ServerError};
use super::replay::{ReplayCache, StoredResponse};
use super::session::SessionManager;
use super::validate::{
    parse_body, ACTION, CLOSE_SESSION, COMMAND, CREATE_SESSION, READ_FILE, WRITE_FILE,
};
use super::{execute, files, upload, ServerConfig};

/// Everything the handlers share.
#[derive(Debug)]
pub struct AppState {
    token: String,
    /// The bash sessions.
    pub sessions: SessionManager,
    replay: Mutex<ReplayCache>,
    max_output_bytes: usize,
    staging_dir: PathBuf,
}

/// Builds the router and its shared state.
pub fn router(config: ServerConfig) -> (Router, Arc<AppState>) {
    let staging_dir = config.shell.scratch_dir.join("uploads");
    let state = Arc::new(AppState {
        token: config.auth_token,
        max_output_bytes: config.shell.max_output_bytes,
        sessions: SessionManager::new(config.shell),
        replay: Mutex::new(ReplayCache::new(config.replay_entries, config.replay_bytes)),
        staging_dir,
    });
    let app = Router::new()
        .route(
            "/",
            get(|| async { Json(json!({"message": "hello world"})) }),
        )
        .route(
            "/is_alive",
            get(|| async { Json(json!({"is_alive": true, "message": ""})) }),
        )
        .route("/create_session", post(create_session))
        .route("/run_in_session", post(run_in_session))
        .route("/close_session", post(close_session))
        .route("/execute", post(execute_handler))
        .route("/read_file", post(read_file))
        .route("/write_file", post(write_file))
        .route("/upload", post(upload_handler))
        .route("/close", post(close))
        .fallback(|| async { detail(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state.clone());
    (app, state)
}

fn detail(status: StatusCode, text: &str) -> Response {
    (status, Json(json!({ "detail": text }))).into_response()
}

/// Authentication (constant-time), then the replay cache.
async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if !state.token.is_empty() {
        match request.headers().get("x-api-key") {
            None => return unauthorized(true),
            Some(given) => {
                if !bool::from(given.as_bytes().ct_eq(state.token.as_bytes())) {
                    return unauthorized(false);
                }
            }
        }
    }
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(id) = id.filter(|i| !i.is_empty()) else {
        return next.run(request).await;
    };
    let cached = state.replay.lock().ok().and_then(|c| c.get(&id));
    if let Some(stored) = cached {
        return json_response(stored.status, stored.body);
    }
    let response = next.run(request).await;
    if response.extensions().get::<NotCacheable>().is_some() {
        return response;
    }
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            if let Ok(mut cache) = state.replay.lock() {
                cache.insert(
                    id,
                    StoredResponse {
                        status: parts.status,
                        body: bytes.clone(),
                    },
                );
            }
            Response::from_parts(parts, Body::from(bytes))
        }
        Err(_) => detail(
            StatusCode::INTERNAL_SERVER_ERROR,
            "response body could not be buffered",
        ),
    }
}

fn json_response(status: StatusCode, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

type Answer = Result<Json<Value>, ServerError>;

fn to_json(value: impl serde::Serialize) -> Answer {
    serde_json::to_value(value)
        .map(Json)
        .map_err(|e| ServerError::exception("builtins.TypeError", e.to_string()))
}

async fn create_session(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let request: CreateSessionRequest = parse_body(&body, &CREATE_SESSION)?;
    to_json(state.sessions.create(&request).await?)
}

async fn run_in_session(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let action: Action = parse_body(&body, &ACTION)?;
    to_json(state.sessions.run(&action).await?)
}

async fn close_session(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let request: CloseSessionRequest = parse_body(&body, &CLOSE_SESSION)?;
    to_json(state.sessions.close_session(&request).await?)
}

async fn execute_handler(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let command: Command = parse_body(&body, &COMMAND)?;
    to_json(execute::execute(&command, state.max_output_bytes).await?)
}

async fn read_file(body: Bytes) -> Answer {
    let request: ReadFileRequest = parse_body(&body, &READ_FILE)?;
    to_json(files::read_file(&request).await?)
}

async fn write_file(body: Bytes) -> Answer {
    let request: WriteFileRequest = parse_body(&body, &WRITE_FILE)?;
    files::write_file(&request).await?;
    Ok(Json(json!({})))
}

async fn upload_handler(
    State(state): State<Arc<AppState>>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Answer {
    let multipart = multipart.map_err(|_| ServerError::Validation(vec![
        json!({"type": "missing", "loc": ["body", "file"], "msg": "Field required", "input": null}),
        json!({"type": "missing", "loc": ["body", "target_path"], "msg": "Field required", "input": null}),
    ]))?;
    let form = upload::read_form(multipart, &state.staging_dir).await?;
    tokio::task::spawn_blocking(move || upload::place(&form))
        .await
        .map_err(|e| ServerError::exception("builtins.RuntimeError", e.to_string()))??;
    Ok(Json(json!({})))
}

async fn close(State(state): State<Arc<AppState>>) -> Answer {
    state.sessions.close_all().await;
    Ok(Json(json!({})))
}
