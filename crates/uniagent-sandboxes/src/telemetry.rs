//! The metrics of the sandbox server and the pool (emitted through the `metrics` facade;
//! `uniagent-sandbox --metrics-addr` and `uniagent-pool --metrics-addr` serve them). The
//! sandboxes a *client* starts are counted by `uniagent_core::telemetry`.

use uniagent_core::telemetry::{MetricDef, MetricKind};

/// Sandbox server requests by route and HTTP status.
pub const SERVER_REQUESTS: &str = "uniagent_sandbox_server_requests_total";
/// Sandbox server time to the response head, by route.
pub const SERVER_REQUEST_SECONDS: &str = "uniagent_sandbox_server_request_seconds";
/// Pool requests by route and HTTP status (lease, renew, release, proxied sandbox calls).
pub const POOL_REQUESTS: &str = "uniagent_pool_requests_total";
/// Pool time to the response head, by route.
pub const POOL_REQUEST_SECONDS: &str = "uniagent_pool_request_seconds";
/// The pool's sandboxes by state (`leased`, `warm`, `starting`), read at each scrape.
pub const POOL_SANDBOXES: &str = "uniagent_pool_sandboxes";
/// Sandboxes the pool holds at most.
pub const POOL_CAPACITY: &str = "uniagent_pool_capacity";

/// Every metric of this crate's servers.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: SERVER_REQUESTS,
        kind: MetricKind::Counter,
        labels: &["route", "status"],
        help: "Sandbox server requests by route and HTTP status.",
    },
    MetricDef {
        name: SERVER_REQUEST_SECONDS,
        kind: MetricKind::Histogram,
        labels: &["route"],
        help: "Sandbox server request time to the response head, in seconds.",
    },
    MetricDef {
        name: POOL_REQUESTS,
        kind: MetricKind::Counter,
        labels: &["route", "status"],
        help: "Pool requests by route and HTTP status.",
    },
    MetricDef {
        name: POOL_REQUEST_SECONDS,
        kind: MetricKind::Histogram,
        labels: &["route"],
        help: "Pool request time to the response head, in seconds.",
    },
    MetricDef {
        name: POOL_SANDBOXES,
        kind: MetricKind::Gauge,
        labels: &["state"],
        help: "Pool sandboxes by state (leased, warm, starting).",
    },
    MetricDef {
        name: POOL_CAPACITY,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Sandboxes the pool holds at most.",
    },
];

/// Publishes a pool's capacity snapshot as gauges (called before each scrape).
#[cfg(feature = "pool")]
pub fn publish_pool(capacity: &crate::leases::Capacity) {
    use metrics::gauge;
    gauge!(POOL_CAPACITY).set(capacity.capacity as f64);
    for (state, n) in [
        ("leased", capacity.leased),
        ("warm", capacity.warm),
        ("starting", capacity.starting),
    ] {
        gauge!(POOL_SANDBOXES, "state" => state).set(n as f64);
    }
}

#[cfg(feature = "server")]
pub(crate) const SERVER_METERED: uniagent_http::RequestMetrics = uniagent_http::RequestMetrics {
    requests: SERVER_REQUESTS,
    seconds: SERVER_REQUEST_SECONDS,
};

#[cfg(feature = "pool")]
pub(crate) const POOL_METERED: uniagent_http::RequestMetrics = uniagent_http::RequestMetrics {
    requests: POOL_REQUESTS,
    seconds: POOL_REQUEST_SECONDS,
};
