//! [`Hardening`]: the middleware in front of every route of a uniagent server.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::site::{is_json_content_type, SitePolicy};

/// Builds a server's JSON error answer from a status and a message, in the server's own shape
/// (`{"detail": ...}`, `{"error": ...}`, OpenAI's `{"error": {"message": ...}}`).
pub type ErrorBody = fn(StatusCode, &str) -> Response;

/// The longest request target (path and query) answered; longer ones get 414 in the server's
/// JSON shape. (hyper itself answers targets past 64 KiB with an empty 414 before any
/// middleware runs.)
pub const MAX_URI_BYTES: usize = 16 * 1024;

/// Error text read back from a framework rejection's body before it is wrapped as JSON.
const MAX_REJECTION_TEXT: usize = 4096;

/// `{"detail": message}`, the shape FastAPI and the sandbox server use.
///
/// ```
/// use axum::http::StatusCode;
/// let response = uniagent_http::detail_body(StatusCode::NOT_FOUND, "Not Found");
/// assert_eq!(response.status(), StatusCode::NOT_FOUND);
/// ```
pub fn detail_body(status: StatusCode, message: &str) -> Response {
    json_response(status, &[("detail", message)])
}

/// `{"error": message}`, the shape the run viewer uses.
///
/// ```
/// use axum::http::StatusCode;
/// let response = uniagent_http::error_body(StatusCode::FORBIDDEN, "Forbidden");
/// assert_eq!(response.status(), StatusCode::FORBIDDEN);
/// ```
pub fn error_body(status: StatusCode, message: &str) -> Response {
    json_response(status, &[("error", message)])
}

/// A flat JSON object of string fields.
fn json_response(status: StatusCode, fields: &[(&str, &str)]) -> Response {
    let object: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).into()))
        .collect();
    (status, axum::Json(object)).into_response()
}

/// The checks every request of a server passes before its route runs, and the JSON shape of
/// every rejection after it:
///
/// - a request target over [`MAX_URI_BYTES`]: 414;
/// - the [`SitePolicy`] (cross-origin, rebound `Host`): 403;
/// - a POST with a body whose `Content-Type` is present and not JSON: 415 (browsers send
///   cross-site "simple" requests as `text/plain` or forms; a missing type is read as JSON,
///   and an empty body, `Content-Length: 0`, passes whatever its type);
/// - any error answer (4xx/5xx) that is not JSON already, such as the framework's 404, 405,
///   bad path parameter or body-limit rejections: rewritten into the server's JSON shape with
///   the same status (and `Allow` header).
///
/// ```
/// use axum::{routing::post, Router};
/// use uniagent_http::{error_body, Hardening, SitePolicy};
/// let app = Router::new().route("/api/x", post(|| async { "{}" }));
/// let app = Hardening::new(SitePolicy::local(), error_body).apply(app);
/// # let _ = app;
/// ```
#[derive(Debug, Clone)]
pub struct Hardening {
    site: SitePolicy,
    json_posts: bool,
    body: ErrorBody,
}

impl Hardening {
    /// Hardening with `site`'s checks, answering rejections with `body`; POST bodies must be
    /// JSON.
    pub fn new(site: SitePolicy, body: ErrorBody) -> Self {
        Self {
            site,
            json_posts: true,
            body,
        }
    }

    /// Accepts POST bodies of any content type (for servers with multipart routes, which check
    /// the type per route).
    pub fn any_post_body(mut self) -> Self {
        self.json_posts = false;
        self
    }

    /// Wraps every route of `router` (its fallbacks included).
    pub fn apply(self, router: Router) -> Router {
        router.layer(middleware::from_fn_with_state(Arc::new(self), harden))
    }
}

async fn harden(State(rules): State<Arc<Hardening>>, request: Request, next: Next) -> Response {
    let target_len = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if target_len > MAX_URI_BYTES {
        return (rules.body)(
            StatusCode::URI_TOO_LONG,
            &format!("URI Too Long: the request target has {target_len} bytes, at most {MAX_URI_BYTES} are accepted"),
        );
    }
    if let Err(refusal) = rules.site.check(request.headers()) {
        return (rules.body)(StatusCode::FORBIDDEN, refusal.message());
    }
    // An empty body carries nothing to misread (`urllib` and `curl -d ''` label it as a form).
    // (HTTP/1.1: no `Content-Length` and no `Transfer-Encoding` means no body.)
    let headers = request.headers();
    let empty_body = match headers.get(header::CONTENT_LENGTH) {
        Some(n) => n.as_bytes() == b"0",
        None => !headers.contains_key(header::TRANSFER_ENCODING),
    };
    if rules.json_posts && request.method() == Method::POST && !empty_body {
        if let Some(kind) = request.headers().get(header::CONTENT_TYPE) {
            if !is_json_content_type(kind.to_str().unwrap_or("")) {
                return (rules.body)(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "Unsupported Media Type: send application/json",
                );
            }
        }
    }
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&response) {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let text = match axum::body::to_bytes(response.into_body(), MAX_REJECTION_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut wrapped = (rules.body)(status, &message);
    if let Some(allow) = allow {
        wrapped.headers_mut().insert(header::ALLOW, allow);
    }
    wrapped
}

fn is_json(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_json_content_type)
}
