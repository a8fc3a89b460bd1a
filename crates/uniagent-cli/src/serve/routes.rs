//! The HTTP routes of `uniagent serve` (`docs/verl.md`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use uniagent_core::agent::CancellationToken;
use uniagent_http::{Hardening, SitePolicy};

use super::{Refusal, RolloutService};

/// The largest request body: a task with its metadata (SWE tasks carry patches and test lists).
const MAX_BODY: usize = 16 << 20;

/// Seconds a client told 429 waits before it tries again.
const RETRY_AFTER_SECS: u32 = 1;

/// The service's routes, hardened like every uniagent server (Host/Origin checks, JSON POSTs,
/// JSON rejections).
pub fn router(service: Arc<RolloutService>) -> Router {
    let routes = Router::new()
        .route("/v1/rollouts", post(rollouts))
        .route("/v1/tasks", get(tasks))
        .route("/v1/info", get(info))
        .route("/healthz", get(|| async { "ok" }));
    let routes = super::telemetry::METERED
        .layer(routes)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(service);
    Hardening::new(SitePolicy::local(), error_response).apply(routes)
}

/// `{"error": {"type": ..., "message": ...}}` with the type named after the status.
fn error_response(status: StatusCode, message: &str) -> Response {
    let kind = match status {
        StatusCode::UNPROCESSABLE_ENTITY | StatusCode::BAD_REQUEST => "invalid_request",
        StatusCode::TOO_MANY_REQUESTS => "busy",
        StatusCode::SERVICE_UNAVAILABLE => "shutting_down",
        StatusCode::NOT_FOUND => "not_found",
        s if s.is_server_error() => "internal",
        _ => "refused",
    };
    (
        status,
        Json(json!({"error": {"type": kind, "message": message}})),
    )
        .into_response()
}

async fn rollouts(State(service): State<Arc<RolloutService>>, body: Bytes) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return refused(Refusal::Bad(super::BadRequest::new(
                "",
                format!("the body is not JSON: {e}"),
            )))
        }
    };
    // The rollout runs in its own task: when the client goes away this handler is dropped,
    // the guard cancels the rollout, and the task still stops its sandbox cleanly.
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let run = tokio::spawn(async move { service.rollout(body, &cancel).await });
    match run.await {
        Ok(Ok(answer)) => (StatusCode::OK, Json(answer)).into_response(),
        Ok(Err(refusal)) => refused(refusal),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the rollout task failed: {e}"),
        ),
    }
}

fn refused(refusal: Refusal) -> Response {
    let message = refusal.to_string();
    match refusal {
        Refusal::Bad(bad) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"error": {
                "type": "invalid_request",
                "field": bad.field,
                "message": bad.message,
            }})),
        )
            .into_response(),
        Refusal::Busy(_) => {
            let mut response = error_response(StatusCode::TOO_MANY_REQUESTS, &message);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
            response
        }
        Refusal::ShuttingDown => error_response(StatusCode::SERVICE_UNAVAILABLE, &message),
        Refusal::Internal(_) => error_response(StatusCode::INTERNAL_SERVER_ERROR, &message),
    }
}

async fn tasks(State(service): State<Arc<RolloutService>>) -> Json<Value> {
    Json(json!({"tasks": service.tasks()}))
}

async fn info(State(service): State<Arc<RolloutService>>) -> Json<Value> {
    Json(service.info())
}
