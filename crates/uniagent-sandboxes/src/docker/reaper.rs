//! Removing the containers of runs that are over: by run id (`cleanup --run-id`), and the
//! leftovers of crashed processes (their owner is gone, or their lifetime deadline passed),
//! which every process sweeps once before its first container starts.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use bollard::Docker;
use futures::future::join_all;
use tokio::sync::OnceCell;
use uniagent_core::Result;

use super::engine::{docker_error, is_not_found};
use super::labels::{Owner, LABEL_DEADLINE, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN_ID};

/// What a sweep removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Ids of the removed containers.
    pub removed: Vec<String>,
    /// `(id, error)` of containers that could not be removed.
    pub failed: Vec<(String, String)>,
}

/// The ids of our containers (any state), optionally of one run only.
pub async fn list_managed(docker: &Docker, run_id: Option<&str>) -> Result<Vec<ManagedContainer>> {
    let mut label_filters = vec![format!("{LABEL_MANAGED}=true")];
    if let Some(run) = run_id {
        label_filters.push(format!("{LABEL_RUN_ID}={run}"));
    }
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([("label".to_owned(), label_filters)])),
        ..Default::default()
    };
    super::engine::count_call();
    let containers = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| docker_error("listing uniagent containers", e))?;
    Ok(containers
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.unwrap_or_default();
            Some(ManagedContainer {
                id: c.id?,
                run_id: labels.get(LABEL_RUN_ID).cloned().unwrap_or_default(),
                owner: labels.get(LABEL_OWNER).and_then(|o| Owner::parse(o)),
                deadline: labels.get(LABEL_DEADLINE).and_then(|d| d.parse().ok()),
            })
        })
        .collect())
}

/// One of our containers, as its labels describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedContainer {
    /// Container id.
    pub id: String,
    /// Its run id.
    pub run_id: String,
    /// The process that started it, when the label parses.
    pub owner: Option<Owner>,
    /// Unix time after which it outlived its lifetime.
    pub deadline: Option<u64>,
}

impl ManagedContainer {
    /// Whether nobody will remove it any more: its owner process on this host is gone, or its
    /// lifetime deadline passed `now_unix`.
    pub fn is_stale(&self, now_unix: u64) -> bool {
        self.owner.as_ref().is_some_and(Owner::is_gone_here)
            || self.deadline.is_some_and(|d| d < now_unix)
    }
}

/// Removes every container of run `run_id` (force, with its anonymous volumes).
pub async fn reap_run(docker: &Docker, run_id: &str) -> Result<Reaped> {
    let ids = list_managed(docker, Some(run_id))
        .await?
        .into_iter()
        .map(|c| c.id)
        .collect();
    Ok(remove_all(docker, ids).await)
}

/// Removes the containers of crashed or expired runs (see [`ManagedContainer::is_stale`]),
/// and the internal network `uniagent-isolated` that earlier versions created for
/// `network: none` (now Docker's own `none` network) when nothing uses it any more.
pub async fn reap_stale(docker: &Docker) -> Result<Reaped> {
    let now = now_unix();
    let ids = list_managed(docker, None)
        .await?
        .into_iter()
        .filter(|c| c.is_stale(now))
        .map(|c| c.id)
        .collect();
    let reaped = remove_all(docker, ids).await;
    remove_legacy_network(docker).await;
    Ok(reaped)
}

/// The network earlier versions put `network: none` sandboxes on.
const LEGACY_NETWORK: &str = "uniagent-isolated";

/// Removes [`LEGACY_NETWORK`] if it exists, is ours and is unused; anything else is left alone.
async fn remove_legacy_network(docker: &Docker) {
    let Ok(network) = docker
        .inspect_network(
            LEGACY_NETWORK,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
    else {
        return;
    };
    let ours = network
        .labels
        .as_ref()
        .is_some_and(|l| l.get(LABEL_MANAGED).map(String::as_str) == Some("true"));
    let unused = network.containers.as_ref().is_none_or(HashMap::is_empty);
    if ours && unused {
        super::engine::count_call();
        match docker.remove_network(LEGACY_NETWORK).await {
            Ok(()) => tracing::info!("removed the unused legacy network {LEGACY_NETWORK}"),
            Err(e) => tracing::debug!(error = %e, "could not remove {LEGACY_NETWORK}"),
        }
    }
}

/// [`reap_stale`] once per process; failures are logged, not fatal.
pub(crate) async fn reap_stale_once(docker: &Docker) {
    static ONCE: OnceCell<()> = OnceCell::const_new();
    ONCE.get_or_init(|| async {
        match reap_stale(docker).await {
            Ok(reaped) if !reaped.removed.is_empty() => tracing::info!(
                count = reaped.removed.len(),
                "removed containers left behind by crashed or expired runs"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not sweep stale uniagent containers"),
        }
    })
    .await;
}

async fn remove_all(docker: &Docker, ids: Vec<String>) -> Reaped {
    let results = join_all(ids.into_iter().map(|id| async move {
        let result = remove_container(docker, &id).await;
        (id, result)
    }))
    .await;
    let mut reaped = Reaped::default();
    for (id, result) in results {
        match result {
            Ok(()) => reaped.removed.push(id),
            Err(e) => reaped.failed.push((id, e.to_string())),
        }
    }
    reaped
}

/// Force-removes one container and its anonymous volumes; a container that is already gone is
/// success.
pub(crate) async fn remove_container(docker: &Docker, id: &str) -> Result<()> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    super::engine::count_call();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        // "removal already in progress" (409) means someone else is removing it.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(docker_error(&format!("removing container {id}"), e)),
    }
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staleness_follows_the_owner_and_the_deadline() {
        let me = Owner::current();
        let live = ManagedContainer {
            id: "a".into(),
            run_id: "r".into(),
            owner: Some(me.clone()),
            deadline: Some(100),
        };
        assert!(!live.is_stale(99));
        assert!(live.is_stale(101), "past its deadline");
        let orphan = ManagedContainer {
            owner: Some(Owner {
                start_ticks: me.start_ticks + 1,
                ..me
            }),
            deadline: None,
            ..live.clone()
        };
        assert!(orphan.is_stale(0));
        let unknown = ManagedContainer {
            owner: None,
            deadline: None,
            ..live
        };
        assert!(!unknown.is_stale(u64::MAX), "no label, no judgement");
    }
}
