//! The HTTP routes (`docs/http.md`, "Gateway") over a [`Gateway`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use uniagent_core::RewardOutcome;

use crate::error::{GatewayError, Result};
use crate::exchange::{Reply, ReplyBody, Route, SseEvent};
use crate::gateway::Gateway;
use crate::wire::openai;

/// Request bodies up to this size are read (long sessions resend long conversations).
const BODY_LIMIT: usize = 256 * 1024 * 1024;

#[derive(Debug)]
struct AppState {
    gateway: Arc<Gateway>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The body of `POST /sessions/{id}/reward` (also what a harness reward command prints):
/// `{"score": 1.0, "success": true, "details": {...}}`, `success` defaulting to `score > 0`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RewardBody {
    score: f64,
    #[serde(default)]
    success: Option<bool>,
    #[serde(default)]
    details: Map<String, Value>,
}

/// Parses a reward body (see the `reward` route).
pub(crate) fn parse_reward(body: &[u8]) -> std::result::Result<RewardOutcome, serde_json::Error> {
    let parsed: RewardBody = serde_json::from_slice(body)?;
    Ok(RewardOutcome {
        score: parsed.score,
        success: parsed.success.unwrap_or(parsed.score > 0.0),
        details: parsed.details,
    })
}

/// The router of `gateway`.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let state = Arc::new(AppState { gateway });
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/sessions/{session}/v1/chat/completions",
            post(model_route(Route::ChatCompletions)),
        )
        .route(
            "/sessions/{session}/v1/messages",
            post(model_route(Route::Messages)),
        )
        .route("/sessions/{session}/v1/models", get(models))
        .route("/sessions/{session}/reward", post(reward))
        .route("/sessions/{session}/end", post(end))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Serves `gateway` on `listener` until `shutdown` resolves, then ends every open session so
/// that its trajectories are recorded.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    axum::serve(listener, router(Arc::clone(&gateway)))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| GatewayError::Internal {
            message: format!("the HTTP server failed: {e}"),
        })?;
    gateway.end_all().await?;
    Ok(())
}

fn openai_error(e: GatewayError) -> Response {
    (e.status(), Json(openai::error_body(&e))).into_response()
}

fn sse(events: Vec<SseEvent>) -> Response {
    let events = events.into_iter().map(|e| {
        let event = match e.event {
            Some(name) => Event::default().event(name),
            None => Event::default(),
        };
        Ok::<_, Infallible>(event.data(e.data))
    });
    Sse::new(futures::stream::iter(events)).into_response()
}

fn respond(reply: Reply) -> Response {
    match reply.body {
        ReplyBody::Json(v) => (reply.status, Json(v)).into_response(),
        ReplyBody::Events(events) => sse(events),
    }
}

/// The handler of one model route (`/v1/chat/completions` or `/v1/messages`).
fn model_route(
    route: Route,
) -> impl Fn(State<Arc<AppState>>, Path<String>, Bytes) -> BoxFuture<'static, Response> + Clone {
    move |State(state), Path(session), body| {
        Box::pin(async move { respond(state.gateway.exchange(&session, route, &body, None).await) })
    }
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    Json(openai::models(&state.gateway.config().model_name, now())).into_response()
}

async fn reward(
    State(state): State<Arc<AppState>>,
    Path(session): Path<String>,
    body: Bytes,
) -> Response {
    let outcome = match parse_reward(&body) {
        Ok(outcome) => outcome,
        Err(e) => return openai_error(GatewayError::invalid(format!("reward body: {e}"))),
    };
    match state.gateway.reward(&session, outcome).await {
        Ok(()) => (StatusCode::OK, Json(json!({"ok": true}))).into_response(),
        Err(e) => openai_error(e),
    }
}

async fn end(State(state): State<Arc<AppState>>, Path(session): Path<String>) -> Response {
    match state.gateway.end(&session).await {
        Ok(records) => Json(Value::Array(records)).into_response(),
        Err(e) => openai_error(e),
    }
}
