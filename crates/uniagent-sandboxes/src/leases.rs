//! The wire types of the sandbox pool API (`docs/pool-openapi.yaml`), shared by the pool
//! service (feature `pool`) and its client, the `faas` backend (feature `faas`).
//!
//! A client asks a pool for a sandbox of an image ([`AcquireRequest`]) and gets a [`Lease`]:
//! an id, the route under the pool's URL where the sandbox's SWE-ReX server answers
//! (`sandbox_path`), the token that route and the lease's own routes take in `X-API-Key`, and
//! an expiry. A lease not renewed before it expires is reaped: its container is removed.
//!
//! ```
//! use uniagent_sandboxes::leases::{AcquireRequest, ApiError, ErrorKind};
//!
//! let request: AcquireRequest = serde_json::from_str(r#"{"image": "debian:12"}"#).unwrap();
//! assert_eq!(request.ttl_secs, None);
//! let full: ApiError = serde_json::from_str(
//!     r#"{"error": {"kind": "capacity_exhausted", "message": "full", "retryable": true}}"#,
//! ).unwrap();
//! assert_eq!(full.error.kind, ErrorKind::CapacityExhausted);
//! ```

use serde::{Deserialize, Serialize};

/// `POST /v1/leases`: a sandbox of `image`, held for `ttl_secs` unless renewed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// One of the images the pool is configured to serve.
    pub image: String,
    /// Seconds the lease lasts without renewal (default: the pool's `lease_ttl`, at most its
    /// `max_ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<f64>,
    /// Limits tighter than the pool's template for the image; a sandbox with other limits than
    /// the template's is started cold instead of taken from the warm pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Free text naming the caller, shown in `GET /v1/leases`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// Resource limits of one sandbox; each at most the pool template's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// CPU quota in cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Maximum number of processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
}

impl Limits {
    /// No limit given.
    pub fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.cpus.is_none() && self.pids_limit.is_none()
    }
}

/// `POST /v1/leases/{id}/renew`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// New time to live from now, seconds (default: the lease's current one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<f64>,
}

/// A sandbox held by one client until `expires_at`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// Lease id (also the sandbox's id on its pool).
    pub id: String,
    /// The image it runs.
    pub image: String,
    /// The pool (node) that holds it.
    pub node: String,
    /// Route of the sandbox's SWE-ReX server, relative to the pool's base URL.
    pub sandbox_path: String,
    /// Token for `sandbox_path` and for renewing or releasing the lease (`X-API-Key`).
    pub token: String,
    /// Time to live from the last renewal, seconds.
    pub ttl_secs: f64,
    /// Unix time (seconds) after which the sandbox is reaped unless renewed.
    pub expires_at: f64,
    /// Whether it came from the warm pool (started before it was asked for).
    pub warm: bool,
}

/// The token is redacted: leases end up in logs.
impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("image", &self.image)
            .field("node", &self.node)
            .field("sandbox_path", &self.sandbox_path)
            .field("token", &"<redacted>")
            .field("ttl_secs", &self.ttl_secs)
            .field("expires_at", &self.expires_at)
            .field("warm", &self.warm)
            .finish()
    }
}

/// One lease as `GET /v1/leases` lists it (no token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// Lease id.
    pub id: String,
    /// The image it runs.
    pub image: String,
    /// The caller's `client` text, if it gave one.
    pub client: Option<String>,
    /// Time to live from the last renewal, seconds.
    pub ttl_secs: f64,
    /// Unix time (seconds) after which it is reaped unless renewed.
    pub expires_at: f64,
    /// Recovered from container labels after the pool restarted.
    pub recovered: bool,
}

/// `GET /v1/leases`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseList {
    /// Every live lease.
    pub leases: Vec<LeaseInfo>,
}

/// `GET /v1/capacity`: how full the node is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// The pool's name.
    pub node: String,
    /// Sandboxes the node holds at most (leased, warm and starting together).
    pub capacity: usize,
    /// Leased sandboxes.
    pub leased: usize,
    /// Started sandboxes waiting in warm pools.
    pub warm: usize,
    /// Sandboxes being started.
    pub starting: usize,
    /// Leases a client can get now without waiting for another to end: free slots plus warm
    /// sandboxes (0 while draining).
    pub available: usize,
    /// The pool is stopping: it takes no new leases and waits for the live ones to end.
    #[serde(default)]
    pub draining: bool,
    /// Per image.
    pub images: Vec<ImageCapacity>,
}

/// One image's warm pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageCapacity {
    /// The image.
    pub image: String,
    /// Warm sandboxes the pool keeps ready.
    pub warm_target: usize,
    /// Warm sandboxes ready now.
    pub warm: usize,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong.
    pub error: ErrorBody,
}

/// What went wrong, typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The kind, for programs.
    pub kind: ErrorKind,
    /// The detail, for people.
    pub message: String,
    /// Whether the same request may succeed later (here or on another pool).
    pub retryable: bool,
}

/// The kinds of error the pool API answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// Malformed request (400).
    BadRequest,
    /// Missing or wrong API key or lease token (401).
    Unauthorized,
    /// The pool does not serve this image (404).
    UnknownImage,
    /// No such lease: never granted, released or reaped (404).
    LeaseNotFound,
    /// Limits or a TTL above what the pool allows (422).
    LimitExceeded,
    /// Every slot is taken; retry later or ask another pool (503, retryable).
    CapacityExhausted,
    /// The sandbox could not be started (502, retryable).
    StartFailed,
    /// The pool is shutting down (503, retryable).
    ShuttingDown,
    /// The lease exists but its sandbox's server does not answer (502): it died.
    SandboxUnreachable,
    /// The pool's Docker daemon does not answer its health probe; retry later or ask another
    /// pool (503, retryable).
    DaemonUnavailable,
}

/// Unix time now, seconds with a fraction.
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The label every container a pool started carries, valued with the pool's name.
pub const LABEL_POOL: &str = "dev.uniagent.pool";
/// The lease (sandbox) id of a pool's container.
pub const LABEL_LEASE: &str = "dev.uniagent.pool.lease";
/// The image key (as clients ask for it) of a pool's container.
pub const LABEL_IMAGE: &str = "dev.uniagent.pool.image";
