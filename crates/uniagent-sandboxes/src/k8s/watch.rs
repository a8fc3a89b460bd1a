//! One watch of a run's claims per process, not one per claim: a `kube::runtime::watcher` over
//! the claims labelled with the run id hands each claim's latest state to the sandbox waiting on
//! it, through a `tokio::sync::watch` channel.
//!
//! A sandbox registers its claim's name *before* creating the claim, so no event is missed. The
//! watcher re-lists after a dropped watch or a `410 Gone`; a registered claim that had been seen
//! and is missing from a complete re-list counts as deleted (an unseen one may simply not exist
//! yet). Stream errors are retried with kube's default backoff (800 ms to 30 s); a waiter gives
//! up only at its own deadline, never because of the stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use tokio::sync::watch;

use super::client::Connection;
use super::crd::SandboxClaim;
use super::names::label_value;
use super::render::LABEL_RUN_ID;

/// The latest state of one claim.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimState {
    /// Not seen yet (being created, or the watch is still listing).
    Unseen,
    /// The claim as last seen.
    Present(Arc<SandboxClaim>),
    /// Gone: a `DELETED` event, or missing from a re-list after it had been seen.
    Deleted,
}

/// Counters of the shared watch, for tests and metrics.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Complete lists (the first and every re-list).
    pub lists: AtomicU64,
    /// Errors the stream reported (each followed by a backoff and a retry).
    pub errors: AtomicU64,
    /// Events handed to waiters.
    pub dispatched: AtomicU64,
}

/// The shared watch of one run's claims in one namespace. Dropping the last handle stops it.
#[derive(Debug, Clone)]
pub struct ClaimWatch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    waiters: Arc<Mutex<Waiters>>,
    stats: Arc<WatchStats>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug, Default)]
struct Waiters {
    by_name: HashMap<String, watch::Sender<ClaimState>>,
    /// Names listed since the last `Init` (to find the seen claims a re-list misses).
    listing: Option<Vec<String>>,
}

impl ClaimWatch {
    /// Starts watching the claims of `run_label` (the run id's label value) through `api`
    /// (namespaced). Needs a tokio runtime.
    pub fn start(api: Api<SandboxClaim>, run_label: &str) -> Self {
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let stats = Arc::new(WatchStats::default());
        let config = watcher::Config::default().labels(&format!("{LABEL_RUN_ID}={run_label}"));
        let stream = watcher::watcher(api, config).default_backoff();
        let task = tokio::spawn(dispatch(stream, waiters.clone(), stats.clone()));
        Self {
            inner: Arc::new(Inner {
                waiters,
                stats,
                task,
            }),
        }
    }

    /// The watch of `run_label`'s claims in `namespace` on `conn`'s cluster: one per process,
    /// started by the first sandbox and stopped when the last handle is dropped.
    pub fn shared(conn: &Connection, namespace: &str, run_label: &str) -> Self {
        static SHARED: OnceLock<Mutex<HashMap<String, Weak<Inner>>>> = OnceLock::new();
        let key = format!("{}|{namespace}|{run_label}", conn.config.cluster_url);
        let mut shared = SHARED
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(inner) = shared.get(&key).and_then(Weak::upgrade) {
            return Self { inner };
        }
        shared.retain(|_, weak| weak.strong_count() > 0);
        let watch = Self::start(
            Api::namespaced(conn.client.clone(), namespace),
            &label_value(run_label),
        );
        shared.insert(key, Arc::downgrade(&watch.inner));
        watch
    }

    /// Registers `name` and returns the receiver of its states; register before creating the
    /// claim. A second registration of the same name shares the channel.
    pub fn register(&self, name: &str) -> watch::Receiver<ClaimState> {
        let mut waiters = self.lock();
        waiters
            .by_name
            .entry(name.to_owned())
            .or_insert_with(|| watch::channel(ClaimState::Unseen).0)
            .subscribe()
    }

    /// Stops following `name`.
    pub fn unregister(&self, name: &str) {
        self.lock().by_name.remove(name);
    }

    /// Claims currently followed.
    pub fn registered(&self) -> usize {
        self.lock().by_name.len()
    }

    /// The watch's counters.
    pub fn stats(&self) -> &WatchStats {
        &self.inner.stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.inner
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

async fn dispatch<S>(stream: S, waiters: Arc<Mutex<Waiters>>, stats: Arc<WatchStats>)
where
    S: futures::Stream<Item = Result<Event<SandboxClaim>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "k8s claim watch failed; retrying after a backoff");
                continue;
            }
        };
        let mut waiters = waiters.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Init => waiters.listing = Some(Vec::new()),
            Event::InitApply(claim) => {
                if let Some(name) = claim.metadata.name.clone() {
                    if let Some(listing) = waiters.listing.as_mut() {
                        listing.push(name.clone());
                    }
                    send(
                        &waiters,
                        &stats,
                        &name,
                        ClaimState::Present(Arc::new(claim)),
                    );
                }
            }
            Event::InitDone => {
                stats.lists.fetch_add(1, Ordering::Relaxed);
                let listed = waiters.listing.take().unwrap_or_default();
                for (name, sender) in &waiters.by_name {
                    let seen = matches!(*sender.borrow(), ClaimState::Present(_));
                    if seen && !listed.contains(name) {
                        sender.send_replace(ClaimState::Deleted);
                        stats.dispatched.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Event::Apply(claim) => {
                if let Some(name) = claim.metadata.name.clone() {
                    send(
                        &waiters,
                        &stats,
                        &name,
                        ClaimState::Present(Arc::new(claim)),
                    );
                }
            }
            Event::Delete(claim) => {
                if let Some(name) = claim.metadata.name.as_deref() {
                    send(&waiters, &stats, name, ClaimState::Deleted);
                }
            }
        }
    }
}

fn send(waiters: &Waiters, stats: &WatchStats, name: &str, state: ClaimState) {
    if let Some(sender) = waiters.by_name.get(name) {
        sender.send_replace(state);
        stats.dispatched.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;
    use crate::k8s::crd::{NameRef, SandboxClaimSpec};

    fn claim(name: &str) -> SandboxClaim {
        SandboxClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: SandboxClaimSpec {
                warm_pool_ref: NameRef {
                    name: "pool".into(),
                },
                lifecycle: None,
            },
            status: None,
        }
    }

    fn waiters_for(names: &[&str]) -> (Arc<Mutex<Waiters>>, Vec<watch::Receiver<ClaimState>>) {
        let mut waiters = Waiters::default();
        let mut receivers = Vec::new();
        for name in names {
            let (tx, rx) = watch::channel(ClaimState::Unseen);
            waiters.by_name.insert((*name).into(), tx);
            receivers.push(rx);
        }
        (Arc::new(Mutex::new(waiters)), receivers)
    }

    #[tokio::test]
    async fn a_relist_deletes_only_the_seen_claims_it_misses() {
        let (waiters, rx) = waiters_for(&["a", "b", "c", "d"]);
        let stats = Arc::new(WatchStats::default());
        let events: Vec<Result<Event<SandboxClaim>, watcher::Error>> = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(claim("a"))),
            Ok(Event::InitApply(claim("other-run-claim"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(claim("b"))),
            Ok(Event::Apply(claim("d"))),
            // The watch dropped and was re-listed: `a` and `b` are gone, `d` is still there,
            // `c` was never seen (it may not be created yet) and stays unseen.
            Ok(Event::Init),
            Ok(Event::InitApply(claim("d"))),
            Ok(Event::InitDone),
        ];
        dispatch(futures::stream::iter(events), waiters, stats.clone()).await;
        assert_eq!(*rx[0].borrow(), ClaimState::Deleted);
        assert_eq!(*rx[1].borrow(), ClaimState::Deleted);
        assert_eq!(*rx[2].borrow(), ClaimState::Unseen);
        assert!(
            matches!(&*rx[3].borrow(), ClaimState::Present(c) if c.metadata.name.as_deref() == Some("d"))
        );
        assert_eq!(stats.lists.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_delete_event_ends_a_claim_and_errors_do_not_end_the_watch() {
        let (waiters, rx) = waiters_for(&["a"]);
        let stats = Arc::new(WatchStats::default());
        let events: Vec<Result<Event<SandboxClaim>, watcher::Error>> = vec![
            Ok(Event::Apply(claim("a"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Delete(claim("a"))),
        ];
        dispatch(futures::stream::iter(events), waiters, stats.clone()).await;
        assert_eq!(*rx[0].borrow(), ClaimState::Deleted);
        assert_eq!(stats.errors.load(Ordering::Relaxed), 1);
        assert_eq!(stats.dispatched.load(Ordering::Relaxed), 2);
    }
}
