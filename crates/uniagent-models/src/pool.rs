//! [`EndpointPool`]: several model servers, least-outstanding-requests balancing, sticky per
//! trajectory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uniagent_core::{Error, Result};

#[derive(Debug)]
struct Endpoint {
    base_url: String,
    outstanding: AtomicUsize,
    /// Until when the endpoint is avoided (it failed, or asked to be left alone with
    /// `Retry-After`).
    cooling_until: Mutex<Option<Instant>>,
    /// Until when the endpoint must not be sent anything (`Retry-After`).
    held_until: Mutex<Option<Instant>>,
}

fn read(at: &Mutex<Option<Instant>>, now: Instant) -> Option<Instant> {
    let until = *at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    until.filter(|u| *u > now)
}

fn extend(at: &Mutex<Option<Instant>>, how_long: Duration) {
    let mut until = at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let new = Instant::now() + how_long;
    if until.is_none_or(|u| u < new) {
        *until = Some(new);
    }
}

impl Endpoint {
    fn cooling(&self, now: Instant) -> Option<Instant> {
        read(&self.cooling_until, now)
    }
}

/// A set of equivalent model servers.
///
/// A request goes to the endpoint with the fewest requests in flight (ties rotate). A request
/// with a session id (the trajectory id) goes where the session's first request went, so its
/// growing prompt hits the same prefix cache; [`EndpointPool::forget`] drops that binding (done
/// after a retryable failure, so a retry can move to a healthy server).
///
/// ```
/// use uniagent_models::EndpointPool;
/// let pool = EndpointPool::new(vec!["http://a:8000/".into(), "http://b:8000".into()]).unwrap();
/// let first = pool.acquire(Some("traj-1"));
/// let other = pool.acquire(None); // the least loaded: not `first`
/// assert_ne!(first.base_url(), other.base_url());
/// drop(other);
/// assert_eq!(pool.acquire(Some("traj-1")).base_url(), first.base_url()); // sticky
/// assert_eq!(first.base_url(), "http://a:8000"); // trailing slash removed
/// ```
#[derive(Debug)]
pub struct EndpointPool {
    endpoints: Vec<Endpoint>,
    sticky: Mutex<HashMap<String, usize>>,
    rotate: AtomicUsize,
    max_sessions: usize,
}

/// One request's claim on an endpoint; releases it when dropped.
#[derive(Debug)]
pub struct Lease<'a> {
    pool: &'a EndpointPool,
    index: usize,
}

impl Lease<'_> {
    /// The endpoint's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.pool.endpoints[self.index].base_url
    }

    /// The endpoint's position in the pool.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.pool.endpoints[self.index]
            .outstanding
            .fetch_sub(1, Ordering::SeqCst);
    }
}

impl EndpointPool {
    /// A pool over `base_urls` (at least one). Sticky bindings are capped at 100,000 sessions;
    /// beyond that the oldest state is dropped wholesale (sessions re-bind to the least loaded).
    pub fn new(base_urls: Vec<String>) -> Result<Self> {
        if base_urls.is_empty() {
            return Err(Error::Config {
                message: "a model backend needs at least one endpoint".into(),
                source: None,
            });
        }
        let endpoints = base_urls
            .into_iter()
            .map(|u| Endpoint {
                base_url: u.trim_end_matches('/').to_owned(),
                outstanding: AtomicUsize::new(0),
                cooling_until: Mutex::new(None),
                held_until: Mutex::new(None),
            })
            .collect();
        Ok(Self {
            endpoints,
            sticky: Mutex::default(),
            rotate: AtomicUsize::new(0),
            max_sessions: 100_000,
        })
    }

    fn sticky(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.sticky
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The least loaded healthy endpoint; when every one is cooling down, the one that
    /// recovers first.
    fn least_loaded(&self) -> usize {
        let n = self.endpoints.len();
        let start = self.rotate.fetch_add(1, Ordering::Relaxed) % n;
        let now = Instant::now();
        let order = (0..n).map(|k| (start + k) % n);
        order
            .clone()
            .filter(|&i| self.endpoints[i].cooling(now).is_none())
            .min_by_key(|&i| self.endpoints[i].outstanding.load(Ordering::SeqCst))
            .or_else(|| order.min_by_key(|&i| self.endpoints[i].cooling(now)))
            .unwrap_or(0)
    }

    /// Prefers other endpoints over `index` for `how_long` (it failed or timed out). Sessions
    /// bound to it re-bind on their next request.
    pub fn cool_down(&self, index: usize, how_long: Duration) {
        if let Some(endpoint) = self.endpoints.get(index) {
            extend(&endpoint.cooling_until, how_long);
        }
    }

    /// Sends nothing to `index` for `how_long` (it answered with `Retry-After`).
    pub fn hold_off(&self, index: usize, how_long: Duration) {
        if let Some(endpoint) = self.endpoints.get(index) {
            extend(&endpoint.cooling_until, how_long);
            extend(&endpoint.held_until, how_long);
        }
    }

    /// How long until some endpoint may be sent a request (zero when one may now): non-zero
    /// only when every endpoint asked to be left alone.
    pub fn wait_for_any(&self) -> Duration {
        let now = Instant::now();
        self.endpoints
            .iter()
            .map(|e| read(&e.held_until, now).map_or(Duration::ZERO, |u| u - now))
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// Whether endpoint `index` is cooling down now.
    pub fn is_cooling(&self, index: usize) -> bool {
        self.endpoints
            .get(index)
            .is_some_and(|e| e.cooling(Instant::now()).is_some())
    }

    /// Claims an endpoint for one request.
    pub fn acquire(&self, session: Option<&str>) -> Lease<'_> {
        let index = match session {
            None => self.least_loaded(),
            Some(s) => {
                let mut sticky = self.sticky();
                let now = Instant::now();
                match sticky.get(s) {
                    // A session stays where its prefix cache is, unless that server is failing.
                    Some(&i) if self.endpoints[i].cooling(now).is_none() => i,
                    _ => {
                        if sticky.len() >= self.max_sessions {
                            sticky.clear();
                        }
                        let i = self.least_loaded();
                        sticky.insert(s.to_owned(), i);
                        i
                    }
                }
            }
        };
        self.endpoints[index]
            .outstanding
            .fetch_add(1, Ordering::SeqCst);
        Lease { pool: self, index }
    }

    /// Drops the sticky binding of `session` (after its endpoint failed, or when it ends).
    pub fn forget(&self, session: &str) {
        self.sticky().remove(session);
    }

    /// Requests in flight per endpoint.
    pub fn outstanding(&self) -> Vec<usize> {
        self.endpoints
            .iter()
            .map(|e| e.outstanding.load(Ordering::SeqCst))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balances_by_outstanding_requests() {
        let pool = EndpointPool::new(vec!["a".into(), "b".into(), "c".into()]).unwrap();
        let leases: Vec<_> = (0..6).map(|_| pool.acquire(None)).collect();
        assert_eq!(pool.outstanding(), vec![2, 2, 2]);
        drop(leases);
        assert_eq!(pool.outstanding(), vec![0, 0, 0]);
    }

    #[test]
    fn sticky_sessions_ignore_load_until_forgotten() {
        let pool = EndpointPool::new(vec!["a".into(), "b".into()]).unwrap();
        let s = pool.acquire(Some("t"));
        let idx = s.index();
        let again = pool.acquire(Some("t"));
        assert_eq!(again.index(), idx);
        pool.forget("t");
        let moved = pool.acquire(Some("t"));
        assert_ne!(moved.index(), idx, "re-bound to the less loaded endpoint");
    }

    #[test]
    fn cooling_endpoints_are_avoided_and_sessions_move() {
        let pool = EndpointPool::new(vec!["a".into(), "b".into()]).unwrap();
        let first = pool.acquire(Some("t")).index();
        pool.cool_down(first, Duration::from_secs(60));
        assert!(pool.is_cooling(first));
        assert_ne!(
            pool.acquire(Some("t")).index(),
            first,
            "moved off the failing server"
        );
        for _ in 0..4 {
            assert_ne!(pool.acquire(None).index(), first);
        }
        pool.cool_down(1 - first, Duration::from_secs(30));
        // All cooling: the one that recovers first; failures alone never make callers wait.
        assert_eq!(pool.acquire(None).index(), 1 - first);
        assert_eq!(pool.wait_for_any(), Duration::ZERO);
        pool.hold_off(0, Duration::from_secs(40));
        assert_eq!(
            pool.wait_for_any(),
            Duration::ZERO,
            "endpoint 1 may be used"
        );
        pool.hold_off(1, Duration::from_secs(20));
        assert!(pool.wait_for_any() > Duration::from_secs(15));
    }

    #[test]
    fn empty_pool_is_a_config_error() {
        assert!(EndpointPool::new(vec![]).is_err());
    }
}
