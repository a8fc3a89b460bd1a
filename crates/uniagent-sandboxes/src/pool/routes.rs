//! The HTTP API (`docs/pool-openapi.yaml`): routes, authentication and typed error answers.

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;

use super::{Pool, PoolError};
use crate::leases::{AcquireRequest, ApiError, ErrorBody, ErrorKind, RenewRequest};

/// Largest control-plane request body; leases are small.
const MAX_BODY: usize = 64 << 10;

pub(super) fn router(pool: Pool) -> Router {
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/capacity", get(capacity))
        .route("/v1/leases", post(acquire).get(list))
        .route("/v1/leases/{id}", delete(release))
        .route("/v1/leases/{id}/renew", post(renew))
        .route("/v1/leases/{id}/sandbox/{*path}", any(proxy));
    crate::telemetry::POOL_METERED
        .layer(routes)
        .with_state(pool)
}

impl IntoResponse for PoolError {
    fn into_response(self) -> Response {
        let (status, retryable) = match self.kind {
            ErrorKind::BadRequest => (StatusCode::BAD_REQUEST, false),
            ErrorKind::Unauthorized => (StatusCode::UNAUTHORIZED, false),
            ErrorKind::UnknownImage | ErrorKind::LeaseNotFound => (StatusCode::NOT_FOUND, false),
            ErrorKind::LimitExceeded => (StatusCode::UNPROCESSABLE_ENTITY, false),
            ErrorKind::CapacityExhausted
            | ErrorKind::ShuttingDown
            | ErrorKind::DaemonUnavailable => (StatusCode::SERVICE_UNAVAILABLE, true),
            ErrorKind::StartFailed => (StatusCode::BAD_GATEWAY, true),
            ErrorKind::SandboxUnreachable => (StatusCode::BAD_GATEWAY, false),
        };
        let body = ApiError {
            error: ErrorBody {
                kind: self.kind,
                message: self.message,
                retryable,
            },
        };
        let mut response = (status, Json(body)).into_response();
        if retryable && status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

fn bad_request(message: impl Into<String>) -> PoolError {
    PoolError::new(ErrorKind::BadRequest, message)
}

/// Parses a JSON body ourselves, so that a malformed one gets the typed error answer.
fn json<T: DeserializeOwned>(body: &Bytes) -> Result<T, PoolError> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("malformed JSON body: {e}")))
}

/// The control-plane key, when the pool has one.
fn authorize(pool: &Pool, headers: &HeaderMap) -> Result<(), PoolError> {
    let Some(key) = &pool.inner.api_key else {
        return Ok(());
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if super::tokens_match(key, given) {
        Ok(())
    } else {
        Err(PoolError::new(
            ErrorKind::Unauthorized,
            "missing or wrong `Authorization: Bearer` key",
        ))
    }
}

/// The lease token of a request.
fn lease_token(headers: &HeaderMap) -> &str {
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// 200 `{"status": "ok"}` while the Docker daemon answers the pool's probe, else 503
/// `{"status": "unhealthy", "reason": ...}`.
async fn healthz(State(pool): State<Pool>) -> Response {
    match pool.inner.health.unhealthy() {
        None => Json(serde_json::json!({"status": "ok"})).into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "unhealthy", "reason": why})),
        )
            .into_response(),
    }
}

async fn capacity(State(pool): State<Pool>, headers: HeaderMap) -> Response {
    match authorize(&pool, &headers) {
        Ok(()) => Json(pool.capacity()).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn list(State(pool): State<Pool>, headers: HeaderMap) -> Response {
    match authorize(&pool, &headers) {
        Ok(()) => Json(pool.list()).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn acquire(State(pool): State<Pool>, headers: HeaderMap, body: Bytes) -> Response {
    let granted = async {
        authorize(&pool, &headers)?;
        if body.len() > MAX_BODY {
            return Err(bad_request("request body too large"));
        }
        let request: AcquireRequest = json(&body)?;
        pool.acquire(request).await
    };
    match granted.await {
        Ok(lease) => (StatusCode::CREATED, Json(lease)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn renew(
    State(pool): State<Pool>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let renewed = (|| {
        let request: RenewRequest = if body.is_empty() {
            RenewRequest::default()
        } else {
            json(&body)?
        };
        pool.renew(&id, lease_token(&headers), request.ttl_secs)
    })();
    match renewed {
        Ok(lease) => Json(lease).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn release(State(pool): State<Pool>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    match pool.release(&id, lease_token(&headers)) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn proxy(
    State(pool): State<Pool>,
    Path((id, path)): Path<(String, String)>,
    request: Request<Body>,
) -> Response {
    let Some((url, proxy)) = pool.upstream(&id, lease_token(request.headers())) else {
        return super::lease_not_found(&id).into_response();
    };
    match proxy.forward(&url, &path, request).await {
        Ok(answer) => answer,
        Err(e) => PoolError::new(ErrorKind::SandboxUnreachable, e.0).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use uniagent_core::config::{parse, ConfigFormat};

    use super::*;

    /// The OpenAPI document names every route and every error kind the code has.
    #[test]
    fn the_openapi_document_matches_the_routes_and_error_kinds() {
        let doc: serde_json::Value = parse(
            include_str!("../../../../docs/pool-openapi.yaml"),
            ConfigFormat::Yaml,
        )
        .unwrap();
        for path in [
            "/healthz",
            "/v1/capacity",
            "/v1/leases",
            "/v1/leases/{id}",
            "/v1/leases/{id}/renew",
            "/v1/leases/{id}/sandbox/{path}",
        ] {
            assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
        }
        let documented = &doc["components"]["schemas"]["ApiError"]["properties"]["error"]
            ["properties"]["kind"]["enum"];
        let kinds = [
            ErrorKind::BadRequest,
            ErrorKind::Unauthorized,
            ErrorKind::UnknownImage,
            ErrorKind::LeaseNotFound,
            ErrorKind::LimitExceeded,
            ErrorKind::CapacityExhausted,
            ErrorKind::StartFailed,
            ErrorKind::ShuttingDown,
            ErrorKind::SandboxUnreachable,
            ErrorKind::DaemonUnavailable,
        ];
        let names: Vec<serde_json::Value> = kinds
            .iter()
            .map(|k| serde_json::to_value(k).unwrap())
            .collect();
        assert_eq!(documented.as_array().unwrap(), &names);
        for kind in kinds {
            let response = PoolError::new(kind, "x").into_response();
            assert!(
                response.status().is_client_error() || response.status().is_server_error(),
                "{kind:?}"
            );
        }
    }
}
