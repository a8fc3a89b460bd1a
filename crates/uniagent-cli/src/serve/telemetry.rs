//! The rollout service's metrics (`uniagent serve --metrics-addr`): its requests by route and
//! status, so that refusals (422, 429, 503) show. The rollouts themselves are counted by the
//! loop's metrics with `phase="serve"` (`uniagent_core::telemetry`).

use uniagent_core::telemetry::{MetricDef, MetricKind};
use uniagent_http::RequestMetrics;

/// Requests answered, by route template and HTTP status.
pub const REQUESTS: &str = "uniagent_serve_requests_total";
/// Time from a request's arrival to its response head, by route template: for
/// `/v1/rollouts`, the whole rollout.
pub const REQUEST_SECONDS: &str = "uniagent_serve_request_seconds";

/// Every metric the rollout service emits besides the loop's.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: REQUESTS,
        kind: MetricKind::Counter,
        labels: &["route", "status"],
        help: "Rollout service requests by route template and HTTP status.",
    },
    MetricDef {
        name: REQUEST_SECONDS,
        kind: MetricKind::Histogram,
        labels: &["route"],
        help: "Rollout service request time to the response head (a whole rollout for /v1/rollouts), in seconds.",
    },
];

/// How the router counts its requests.
pub(super) const METERED: RequestMetrics = RequestMetrics {
    requests: REQUESTS,
    seconds: REQUEST_SECONDS,
};
