//! [`EndpointPool`]: several model servers, least-outstanding-requests balancing, sticky per
//! trajectory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use uniagent_core::{Error, Result};

#[derive(Debug)]
struct Endpoint {
    base_url: String,
    outstanding: AtomicUsize,
}

/// A set of equivalent model servers.
///
/// A request goes to the endpoint with the fewest requests in flight (ties rotate). A request
/// with a session id (the trajectory id) goes where the session's first request went, so its
/// growing prompt hits the same prefix cache; [`EndpointPool::forget`] drops that binding (done
/// after a retryable failure, so a retry can move to a healthy server).
///
/// ```
/// use uniagent_envs::models::EndpointPool;
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

    fn least_loaded(&self) -> usize {
        let n = self.endpoints.len();
        let start = self.rotate.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| self.endpoints[i].outstanding.load(Ordering::SeqCst))
            .unwrap_or(0)
    }

    /// Claims an endpoint for one request.
    pub fn acquire(&self, session: Option<&str>) -> Lease<'_> {
        let index = match session {
            None => self.least_loaded(),
            Some(s) => {
                let mut sticky = self.sticky();
                match sticky.get(s) {
                    Some(&i) => i,
                    None => {
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
    fn empty_pool_is_a_config_error() {
        assert!(EndpointPool::new(vec![]).is_err());
    }
}
