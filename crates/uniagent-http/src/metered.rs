//! Request metrics for a router: a counter by route template and status, and a histogram of
//! the time to the response head, emitted through the `metrics` facade.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::Router;
use metrics::{counter, histogram};

/// The names a server counts its requests under.
///
/// ```
/// use axum::{routing::get, Router};
/// use uniagent_http::RequestMetrics;
///
/// let metered = RequestMetrics {
///     requests: "my_requests_total",
///     seconds: "my_request_seconds",
/// };
/// let app: Router = metered.layer(Router::new().route("/items/{id}", get(|| async { "ok" })));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestMetrics {
    /// Counter of requests, labelled `route` (the template, e.g. `/items/{id}`, never the
    /// path itself) and `status`.
    pub requests: &'static str,
    /// Histogram of seconds to the response head, labelled `route`.
    pub seconds: &'static str,
}

impl RequestMetrics {
    /// Counts every request that reaches one of `router`'s routes (add it after the routes;
    /// requests no route matches are not counted, so a scanner cannot grow the label set).
    pub fn layer<S: Clone + Send + Sync + 'static>(self, router: Router<S>) -> Router<S> {
        router.route_layer(axum::middleware::from_fn(
            move |request: Request, next: Next| self.count(request, next),
        ))
    }

    async fn count(self, request: Request, next: Next) -> axum::response::Response {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
        let started = Instant::now();
        let response = next.run(request).await;
        let status = response.status().as_u16().to_string();
        histogram!(self.seconds, "route" => route.clone()).record(started.elapsed().as_secs_f64());
        counter!(self.requests, "route" => route, "status" => status).increment(1);
        response
    }
}
