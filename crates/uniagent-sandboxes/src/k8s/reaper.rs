//! Deleting the claims nobody will delete any more: every claim of a run (`uniagent k8s reap
//! --run`), and the claims of crashed workers (their owner process on this host is gone, or their
//! `shutdownTime` passed a minute ago without the controller ending them), which every process
//! sweeps once per namespace before its first claim.
//!
//! A worker on another host is never judged gone from here: its claims end at their
//! `shutdownTime`, which only a live owner renews.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use futures::stream::{self, StreamExt};
use kube::api::ListParams;
use kube::Api;
use uniagent_core::Result;

use super::client::{connect, Connection};
use super::crd::{SandboxClaim, LABEL_CREATED_BY};
use super::names::label_value;
use super::render::{ANNOTATION_OWNER, LABEL_OWNER, LABEL_ROLLOUT, LABEL_RUN_ID};
use super::K8sConfig;
use crate::owner::Owner;

/// How long past its `shutdownTime` a claim is left to the controller before a sweep deletes
/// it (the controller may be down).
pub const SHUTDOWN_GRACE_SECS: i64 = 60;
/// Claims listed per request.
const PAGE: u32 = 500;
/// Deletions in flight at once.
const PARALLEL_DELETES: usize = 16;

/// One of our claims, as its metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedClaim {
    /// The claim's name.
    pub name: String,
    /// Its run id label (hashed when the run id is not a valid label value).
    pub run_id: String,
    /// Its rollout label, when set.
    pub rollout: Option<String>,
    /// The process that created it, when its annotation (or label) parses.
    pub owner: Option<Owner>,
    /// Its `shutdownTime`, seconds since the epoch.
    pub shutdown_unix: Option<i64>,
    /// Whether a deletion is already under way.
    pub deleting: bool,
    /// Whether its `Ready` condition is true.
    pub ready: bool,
}

impl ManagedClaim {
    /// Whether nobody will delete it any more: its owner on this host is gone, or its
    /// `shutdownTime` passed more than [`SHUTDOWN_GRACE_SECS`] before `now_unix`.
    pub fn is_stale(&self, now_unix: i64) -> bool {
        self.owner.as_ref().is_some_and(Owner::is_gone_here)
            || self
                .shutdown_unix
                .is_some_and(|t| t + SHUTDOWN_GRACE_SECS < now_unix)
    }

    fn of(claim: SandboxClaim) -> Option<Self> {
        let meta = claim.metadata;
        let labels = meta.labels.unwrap_or_default();
        let owner = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_OWNER))
            .and_then(|o| Owner::parse(o))
            .or_else(|| labels.get(LABEL_OWNER).and_then(|o| Owner::parse_dotted(o)));
        let shutdown_unix = claim
            .spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.shutdown_time.as_deref())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second());
        let ready = claim
            .status
            .as_ref()
            .and_then(|s| super::crd::condition(&s.conditions, "Ready"))
            .is_some_and(|c| c.status == "True");
        Some(Self {
            name: meta.name?,
            run_id: labels.get(LABEL_RUN_ID).cloned().unwrap_or_default(),
            rollout: labels.get(LABEL_ROLLOUT).cloned(),
            owner,
            shutdown_unix,
            deleting: meta.deletion_timestamp.is_some(),
            ready,
        })
    }
}

/// What a reap deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Names of the deleted claims.
    pub deleted: Vec<String>,
    /// `(name, error)` of claims whose deletion failed.
    pub failed: Vec<(String, String)>,
}

/// Our claims in `cfg.namespace`, optionally of one run only (every page of the list).
pub async fn list(cfg: &K8sConfig, run_id: Option<&str>) -> Result<Vec<ManagedClaim>> {
    let conn = connect(cfg).await?;
    list_on(&conn, &cfg.namespace, run_id).await
}

async fn list_on(
    conn: &Connection,
    namespace: &str,
    run_id: Option<&str>,
) -> Result<Vec<ManagedClaim>> {
    let api: Api<SandboxClaim> = Api::namespaced(conn.client.clone(), namespace);
    let mut selector = format!("{LABEL_CREATED_BY}=uniagent");
    if let Some(run) = run_id {
        selector.push_str(&format!(",{LABEL_RUN_ID}={}", label_value(run)));
    }
    let mut found = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        if let Some(t) = token.take() {
            params = params.continue_token(&t);
        }
        let page = conn
            .call("list", "sandboxclaims", namespace, api.list(&params))
            .await
            .map_err(|(_, e)| e)?;
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        found.extend(page.items.into_iter().filter_map(ManagedClaim::of));
        if token.is_none() {
            return Ok(found);
        }
    }
}

/// Deletes every claim of run `run_id` in `cfg.namespace` (foreground; the controller then
/// removes its sandbox and pod).
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use uniagent_sandboxes::k8s::{reaper, K8sConfig};
///
/// let cfg = K8sConfig { namespace: "agents".into(), ..K8sConfig::default() };
/// let reaped = reaper::reap_run(&cfg, "exp-7").await?;
/// println!("{} claims deleted", reaped.deleted.len());
/// # Ok(()) }
/// ```
pub async fn reap_run(cfg: &K8sConfig, run_id: &str) -> Result<Reaped> {
    let conn = connect(cfg).await?;
    let names = list_on(&conn, &cfg.namespace, Some(run_id))
        .await?
        .into_iter()
        .map(|c| c.name)
        .collect();
    Ok(delete_all(&conn, &cfg.namespace, names).await)
}

/// Deletes the claims of crashed or expired owners in `cfg.namespace` (see
/// [`ManagedClaim::is_stale`]).
pub async fn reap_stale(cfg: &K8sConfig) -> Result<Reaped> {
    let conn = connect(cfg).await?;
    reap_stale_on(&conn, &cfg.namespace).await
}

async fn reap_stale_on(conn: &Connection, namespace: &str) -> Result<Reaped> {
    let now = super::claims::unix_now();
    let names = list_on(conn, namespace, None)
        .await?
        .into_iter()
        .filter(|c| c.is_stale(now))
        .map(|c| c.name)
        .collect();
    Ok(delete_all(conn, namespace, names).await)
}

/// [`reap_stale`] once per process, API server and namespace; failures are logged, not fatal.
pub(super) async fn reap_stale_once(conn: &Connection, namespace: &str) {
    static SWEPT: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let key = format!("{}|{namespace}", conn.config.cluster_url);
    let first = SWEPT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key);
    if !first {
        return;
    }
    match reap_stale_on(conn, namespace).await {
        Ok(reaped) => {
            if !reaped.deleted.is_empty() {
                tracing::info!(
                    count = reaped.deleted.len(),
                    namespace,
                    "deleted the claims of crashed or expired uniagent workers"
                );
            }
            for (name, error) in &reaped.failed {
                tracing::warn!(claim = %name, %error, "could not delete a stale claim");
            }
        }
        Err(error) => tracing::warn!(%error, namespace, "could not sweep stale claims"),
    }
}

async fn delete_all(conn: &Connection, namespace: &str, names: Vec<String>) -> Reaped {
    let results: Vec<_> = stream::iter(names)
        .map(|name| async move {
            let result = super::claims::delete_now(conn, namespace, &name).await;
            (name, result)
        })
        .buffer_unordered(PARALLEL_DELETES)
        .collect()
        .await;
    let mut reaped = Reaped::default();
    for (name, result) in results {
        match result {
            Ok(()) => reaped.deleted.push(name),
            Err(e) => reaped.failed.push((name, e.to_string())),
        }
    }
    reaped.deleted.sort();
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_means_owner_gone_here_or_shutdown_passed() {
        let me = Owner::current();
        let claim = |owner: Option<Owner>, shutdown_unix: Option<i64>| ManagedClaim {
            name: "c".into(),
            run_id: "r".into(),
            rollout: None,
            owner,
            shutdown_unix,
            deleting: false,
            ready: true,
        };
        assert!(!claim(Some(me.clone()), Some(200)).is_stale(100));
        assert!(
            !claim(Some(me.clone()), Some(50)).is_stale(100),
            "the controller's minute"
        );
        assert!(claim(Some(me.clone()), Some(30)).is_stale(100));
        let dead = Owner {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(claim(Some(dead), None).is_stale(100));
        let elsewhere = Owner {
            host: format!("{}-elsewhere", me.host),
            ..me
        };
        assert!(!claim(Some(elsewhere), None).is_stale(100));
        assert!(!claim(None, None).is_stale(100));
    }
}
