//! The HTTP routes (`docs/http.md`, "Gateway") over a [`Gateway`], behind
//! [`uniagent_http`]'s hardening: local or allow-listed `Host` only, no cross-origin requests,
//! JSON bodies only, every rejection in OpenAI's error shape, bounded connections and header
//! reads, and a shutdown that ends within a bound with every open session recorded.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
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
use uniagent_http::{Hardening, ServeLimits, SitePolicy};

use crate::error::{GatewayError, Result};
use crate::exchange::{Reply, ReplyBody, Route, SseEvent};
use crate::gateway::Gateway;
use crate::telemetry;
use crate::wire::openai;

/// How long requests in flight may run on at shutdown before they are cancelled (a cancelled
/// request leaves its chain as it was before the request), after which every open session is
/// ended and recorded.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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

/// The router of `gateway`, hardened (see the module docs).
pub fn router(gateway: Arc<Gateway>) -> Router {
    let config = gateway.config();
    let site = SitePolicy::local().allow_hosts(&config.allowed_hosts);
    let body_limit = config.body_limit();
    let state = Arc::new(AppState { gateway });
    let routes = telemetry::METERED
        .layer(
            Router::new()
                .route("/healthz", get(|| async { "ok" }))
                .route(
                    "/sessions/{session}/v1/chat/completions",
                    post(model_route(Route::ChatCompletions)),
                )
                .route(
                    "/sessions/{session}/v1/responses",
                    post(model_route(Route::Responses)),
                )
                .route(
                    "/sessions/{session}/v1/messages",
                    post(model_route(Route::Messages)),
                )
                .route("/sessions/{session}/v1/models", get(models))
                .route("/sessions/{session}/reward", post(reward))
                .route("/sessions/{session}/end", post(end)),
        )
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state);
    Hardening::new(site, rejection).apply(routes)
}

/// A rejection of the hardening layer or the framework (403, 404, 405, 413, 414, 415, a bad
/// path) in OpenAI's error shape.
fn rejection(status: StatusCode, message: &str) -> Response {
    let code = match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
        _ => "invalid_request_error",
    };
    (status, Json(openai::error_object(message, code))).into_response()
}

/// Serves `gateway` on `listener` until `shutdown` resolves, then ends every open session so
/// that its trajectories are recorded.
///
/// At most 1,024 connections are served at once, each gets 30 s to send a request's headers,
/// and at shutdown requests in flight get [`SHUTDOWN_GRACE`] before they are cancelled: the
/// call returns within that grace plus the time the recording takes.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let limits = ServeLimits {
        shutdown_grace: SHUTDOWN_GRACE,
        ..ServeLimits::default()
    };
    uniagent_http::serve(listener, router(Arc::clone(&gateway)), limits, shutdown)
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

/// A request body as the framework read it (too large, or cut off).
type BodyRead = std::result::Result<Bytes, BytesRejection>;

/// A request body, or the route's error when it could not be read (413 naming the limit).
fn read_body(state: &AppState, body: BodyRead) -> std::result::Result<Bytes, GatewayError> {
    body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => GatewayError::BodyTooLarge {
            limit: state.gateway.config().body_limit(),
        },
        _ => GatewayError::invalid(rejection.body_text()),
    })
}

/// The handler of one model route (`/v1/chat/completions`, `/v1/responses` or `/v1/messages`).
fn model_route(
    route: Route,
) -> impl Fn(State<Arc<AppState>>, Path<String>, BodyRead) -> BoxFuture<'static, Response> + Clone {
    move |State(state), Path(session), body| {
        Box::pin(async move {
            match read_body(&state, body) {
                Ok(body) => respond(state.gateway.exchange(&session, route, &body, None).await),
                Err(e) => respond(Reply::error(route, &e)),
            }
        })
    }
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    Json(openai::models(&state.gateway.config().model_name, now())).into_response()
}

async fn reward(
    State(state): State<Arc<AppState>>,
    Path(session): Path<String>,
    body: BodyRead,
) -> Response {
    let body = match read_body(&state, body) {
        Ok(body) => body,
        Err(e) => return openai_error(e),
    };
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
