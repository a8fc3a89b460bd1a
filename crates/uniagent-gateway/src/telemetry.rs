//! The gateway's metrics (emitted through the `metrics` facade; `uniagent gateway
//! --metrics-addr` serves them): sessions open, requests by route and status, and the time
//! spent generating, so that the gateway's own overhead per request is the difference.

use std::time::Instant;

use metrics::{gauge, histogram};
use uniagent_core::telemetry::{MetricDef, MetricKind};
use uniagent_http::RequestMetrics;

/// Sessions open now.
pub const SESSIONS_OPEN: &str = "uniagent_gateway_sessions_open";
/// Requests answered, by route template and HTTP status.
pub const REQUESTS: &str = "uniagent_gateway_requests_total";
/// Time from a request's arrival to its response head, by route template.
pub const REQUEST_SECONDS: &str = "uniagent_gateway_request_seconds";
/// Time the policy spent generating for one model request (the rest of the request time is
/// the gateway's overhead: parsing, templating, recording).
pub const GENERATE_SECONDS: &str = "uniagent_gateway_generate_seconds";

/// Every metric the gateway emits.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: SESSIONS_OPEN,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Gateway sessions open now.",
    },
    MetricDef {
        name: REQUESTS,
        kind: MetricKind::Counter,
        labels: &["route", "status"],
        help: "Gateway requests by route template and HTTP status.",
    },
    MetricDef {
        name: REQUEST_SECONDS,
        kind: MetricKind::Histogram,
        labels: &["route"],
        help: "Gateway request time to the response head, in seconds.",
    },
    MetricDef {
        name: GENERATE_SECONDS,
        kind: MetricKind::Histogram,
        labels: &[],
        help: "Policy generation time of one gateway model request, in seconds.",
    },
];

pub(crate) fn session_opened() {
    gauge!(SESSIONS_OPEN).increment(1.0);
}

pub(crate) fn session_closed() {
    gauge!(SESSIONS_OPEN).decrement(1.0);
}

pub(crate) fn generated(started: Instant) {
    histogram!(GENERATE_SECONDS).record(started.elapsed().as_secs_f64());
}

/// How the router counts its requests.
pub(crate) const METERED: RequestMetrics = RequestMetrics {
    requests: REQUESTS,
    seconds: REQUEST_SECONDS,
};
