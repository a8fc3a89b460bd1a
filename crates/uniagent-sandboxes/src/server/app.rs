//! The axum application: routes, authentication, the replay cache and the handlers.

use std::collections::HashMap;
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
use tokio::sync::Semaphore;
use uniagent_core::sandbox::{
    Action, CloseSessionRequest, Command, CreateSessionRequest, ReadFileRequest, WriteFileRequest,
};
use uniagent_http::SitePolicy;

use super::errors::{class, unauthorized, NotCacheable, ServerError};
use super::extract::SweRexBody;
use super::replay::{ReplayCache, StoredResponse};
use super::session::SessionManager;
use super::{execute, files, upload, ServerConfig, ServerLimits};

/// The answer of a request that is still running, for repeats of its `X-Request-ID`.
type InFlight = tokio::sync::watch::Sender<Option<StoredResponse>>;

/// Everything the handlers share.
#[derive(Debug)]
pub struct AppState {
    token: String,
    /// Per-sandbox signed tokens, accepted besides `token`.
    signed_tokens: Option<Arc<crate::signed_token::Verifier>>,
    /// Origin checks always; `Host` checks too when authentication is off (nothing else then
    /// stops a DNS-rebinding page from posting commands).
    site: SitePolicy,
    /// The bash sessions.
    pub sessions: SessionManager,
    replay: Mutex<ReplayCache>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    max_output_bytes: usize,
    staging_dir: PathBuf,
    limits: ServerLimits,
    /// Slots for `/execute` children.
    executes: Arc<Semaphore>,
}

/// Builds the router and its shared state.
pub fn router(config: ServerConfig) -> (Router, Arc<AppState>) {
    let staging_dir = config.shell.scratch_dir.join("uploads");
    let json_limit = DefaultBodyLimit::max(config.limits.max_body_bytes);
    let site = if config.auth_token.is_empty() && config.signed_tokens.is_none() {
        SitePolicy::local()
    } else {
        SitePolicy::any_host()
    };
    let state = Arc::new(AppState {
        site,
        token: config.auth_token,
        signed_tokens: config.signed_tokens,
        max_output_bytes: config.shell.max_output_bytes,
        sessions: SessionManager::new(config.shell, config.limits.max_sessions),
        executes: Arc::new(Semaphore::new(config.limits.max_executes.max(1))),
        replay: Mutex::new(ReplayCache::new(config.replay_entries, config.replay_bytes)),
        in_flight: Mutex::new(HashMap::new()),
        staging_dir,
        limits: config.limits,
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
        .route("/create_session", post(create_session).layer(json_limit))
        .route("/run_in_session", post(run_in_session).layer(json_limit))
        .route("/close_session", post(close_session).layer(json_limit))
        .route("/execute", post(execute_handler).layer(json_limit))
        .route("/read_file", post(read_file).layer(json_limit))
        .route("/write_file", post(write_file).layer(json_limit))
        .route(
            "/upload",
            post(upload_handler).layer(DefaultBodyLimit::max(config.limits.max_upload_bytes)),
        )
        .route("/close", post(close).layer(json_limit));
    let app = crate::telemetry::SERVER_METERED
        .layer(app)
        .fallback(|| async { detail(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state.clone());
    (app, state)
}

fn detail(status: StatusCode, text: &str) -> Response {
    (status, Json(json!({ "detail": text }))).into_response()
}

/// Whether `given` is the static token (constant-time compare) or a signed token for this
/// sandbox.
fn authenticated(state: &AppState, given: &HeaderValue) -> bool {
    if !state.token.is_empty() && bool::from(given.as_bytes().ct_eq(state.token.as_bytes())) {
        return true;
    }
    let Some(verifier) = &state.signed_tokens else {
        return false;
    };
    let Ok(token) = given.to_str() else {
        tracing::debug!("signed token refused: not ASCII");
        return false;
    };
    match verifier.verify(token) {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, "signed token refused");
            false
        }
    }
}

/// Authentication (constant-time), then the work itself in its own task (a client that
/// disconnects cannot cancel a command half-way), deduplicated by `X-Request-ID`: a repeated ID
/// gets the stored answer, and a repeat that arrives while the first is still running waits for
/// its answer instead of running the work again.
async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Err(why) = state.site.check(request.headers()) {
        let mut response = detail(StatusCode::FORBIDDEN, why.message());
        response.extensions_mut().insert(NotCacheable);
        return response;
    }
    if !state.token.is_empty() || state.signed_tokens.is_some() {
        match request.headers().get("x-api-key") {
            None => return unauthorized(true),
            Some(given) => {
                if !authenticated(&state, given) {
                    return unauthorized(false);
                }
            }
        }
    }
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|i| !i.is_empty())
        .map(str::to_owned);
    let Some(id) = id else {
        return detached(next.run(request)).await;
    };
    let waiter = {
        let mut flights = lock(&state.in_flight);
        if let Some(stored) = lock(&state.replay).get(&id) {
            return json_response(stored.status, stored.body);
        }
        match flights.get(&id) {
            Some(sender) => Some(sender.subscribe()),
            None => {
                flights.insert(id.clone(), tokio::sync::watch::channel(None).0);
                None
            }
        }
    };
    if let Some(mut receiver) = waiter {
        return match receiver.wait_for(Option::is_some).await {
            Ok(answer) => match answer.as_ref() {
                Some(stored) => json_response(stored.status, stored.body.clone()),
                None => detail(StatusCode::INTERNAL_SERVER_ERROR, "request failed"),
            },
            Err(_) => detail(StatusCode::INTERNAL_SERVER_ERROR, "request failed"),
        };
    }
    let task_state = state.clone();
    let work = tokio::spawn(async move {
        let mut forget = ForgetFlight {
            state: task_state.clone(),
            id: id.clone(),
            armed: true,
        };
        let response = next.run(request).await;
        let cacheable = response.extensions().get::<NotCacheable>().is_none();
        let (parts, body) = response.into_parts();
        let stored = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(bytes) => StoredResponse {
                status: parts.status,
                body: bytes,
            },
            Err(_) => StoredResponse {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                body: Bytes::from_static(br#"{"detail":"response body could not be buffered"}"#),
            },
        };
        // Lock order: in-flight table, then cache (as the lookup above), so a repeat finds the
        // answer in one of the two.
        let mut flights = lock(&task_state.in_flight);
        if cacheable {
            lock(&task_state.replay).insert(id.clone(), stored.clone());
        }
        if let Some(sender) = flights.remove(&id) {
            sender.send_replace(Some(stored.clone()));
        }
        forget.armed = false;
        stored
    });
    match work.await {
        Ok(stored) => json_response(stored.status, stored.body),
        Err(_) => detail(StatusCode::INTERNAL_SERVER_ERROR, "request handler failed"),
    }
}

/// Removes a request's in-flight entry however its task ends (a panic included), so repeats
/// waiting on it get an answer (500) instead of waiting forever.
struct ForgetFlight {
    state: Arc<AppState>,
    id: String,
    armed: bool,
}

impl Drop for ForgetFlight {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.state.in_flight).remove(&self.id);
        }
    }
}

/// Runs a handler in its own task: it completes even when the client goes away, and a panic
/// becomes a 500 answer instead of a dropped connection.
async fn detached(work: impl std::future::Future<Output = Response> + Send + 'static) -> Response {
    match tokio::spawn(work).await {
        Ok(response) => response,
        Err(_) => detail(StatusCode::INTERNAL_SERVER_ERROR, "request handler failed"),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

async fn create_session(
    State(state): State<Arc<AppState>>,
    SweRexBody(request): SweRexBody<CreateSessionRequest>,
) -> Answer {
    to_json(state.sessions.create(&request).await?)
}

async fn run_in_session(
    State(state): State<Arc<AppState>>,
    SweRexBody(action): SweRexBody<Action>,
) -> Answer {
    to_json(state.sessions.run(&action).await?)
}

async fn close_session(
    State(state): State<Arc<AppState>>,
    SweRexBody(request): SweRexBody<CloseSessionRequest>,
) -> Answer {
    to_json(state.sessions.close_session(&request).await?)
}

async fn execute_handler(
    State(state): State<Arc<AppState>>,
    SweRexBody(command): SweRexBody<Command>,
) -> Answer {
    // Waiting for a slot bounds the children; the connection limit bounds the waiters.
    let _slot =
        state.executes.acquire().await.map_err(|_| {
            ServerError::exception(class::RUNTIME_ERROR, "the server is shutting down")
        })?;
    to_json(execute::execute(&command, state.max_output_bytes).await?)
}

async fn read_file(
    State(state): State<Arc<AppState>>,
    SweRexBody(request): SweRexBody<ReadFileRequest>,
) -> Answer {
    to_json(files::read_file(&request, state.limits.max_read_bytes).await?)
}

async fn write_file(SweRexBody(request): SweRexBody<WriteFileRequest>) -> Answer {
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
    let limits = state.limits.unzip;
    tokio::task::spawn_blocking(move || upload::place(&form, &limits))
        .await
        .map_err(|e| ServerError::exception("builtins.RuntimeError", e.to_string()))??;
    Ok(Json(json!({})))
}

async fn close(State(state): State<Arc<AppState>>) -> Answer {
    state.sessions.close_all().await;
    Ok(Json(json!({})))
}
