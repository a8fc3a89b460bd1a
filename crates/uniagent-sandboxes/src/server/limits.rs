//! The server's resource limits: what one request, one upload or one client may use.

use std::time::Duration;

use tokio::time::Instant;

use super::unzip::UnzipLimits;

/// Limits on request sizes, concurrency and extraction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest JSON request body (413 above it).
    pub max_body_bytes: usize,
    /// Largest `/upload` body (413 above it).
    pub max_upload_bytes: usize,
    /// Largest file `/read_file` returns; larger files and anything that is not a regular file
    /// (FIFOs, devices) are refused.
    pub max_read_bytes: u64,
    /// Budgets for `/upload` with `unzip`.
    pub unzip: UnzipLimits,
    /// Open bash sessions.
    pub max_sessions: usize,
    /// `/execute` children running at once (more requests wait for a slot).
    pub max_executes: usize,
    /// Client connections served at once (more wait in the listen backlog).
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 << 20,
            max_upload_bytes: 4 << 30,
            max_read_bytes: 64 << 20,
            unzip: UnzipLimits::default(),
            max_sessions: 256,
            max_executes: 64,
            max_connections: 1024,
            header_timeout: Duration::from_secs(30),
        }
    }
}

/// The longest timeout the server honours (about 116 days): larger values, and infinity, are
/// clamped to it, so no deadline arithmetic can overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10_000_000);

/// The most `bash_interrupt` retries honoured; `n_retry` is clamped to it.
pub(crate) const MAX_INTERRUPT_RETRIES: u32 = 64;

/// A timeout in seconds from a request, clamped to `[0, MAX_TIMEOUT]` (NaN counts as 0).
///
/// ```
/// use std::time::Duration;
/// use uniagent_sandboxes::server::{seconds, MAX_TIMEOUT};
/// assert_eq!(seconds(1.5), Duration::from_millis(1500));
/// assert_eq!(seconds(1e300), MAX_TIMEOUT);
/// assert_eq!(seconds(f64::INFINITY), MAX_TIMEOUT);
/// assert_eq!(seconds(f64::NAN), Duration::ZERO);
/// assert_eq!(seconds(-3.0), Duration::ZERO);
/// ```
pub fn seconds(t: f64) -> Duration {
    if t.is_nan() || t <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(t).map_or(MAX_TIMEOUT, |d| d.min(MAX_TIMEOUT))
}

/// The instant `after` from now, saturating far in the future instead of overflowing.
pub(crate) fn deadline_after(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after.min(MAX_TIMEOUT))
        .unwrap_or(now + Duration::from_secs(86_400))
}
