//! An overall deadline for each Docker and pool test, and cleanup when one fails.
//!
//! [`deadline`] runs a test's body under `tokio::time::timeout` (the test's limit, or
//! `$UNIAGENT_DOCKER_TEST_DEADLINE_SECS`). The run ids and pool names a test makes are
//! [`track`]ed (by `docker_common::run_id` and `pool_common::unique`); when the body panics or
//! runs out of time, every container labelled with one of them is force-removed (each Docker
//! call with a short deadline of its own, so a wedged daemon cannot hang the cleanup either)
//! and the test fails naming itself and how many containers it removed and left.
//!
//! Included by `docker_common` and `pool_common` as their `deadline` module.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use futures::FutureExt;
use uniagent_sandboxes::docker::{engine, LABEL_RUN_ID};
use uniagent_sandboxes::leases::LABEL_POOL;

/// The limit of most tests: correctness, not speed, on a loaded 2-core machine.
pub const DEFAULT: Duration = Duration::from_secs(120);
/// The limit of the scale tests and of tests that wait out TTLs or restarts.
pub const LONG: Duration = Duration::from_secs(300);
/// Overrides every test's limit (seconds).
pub const DEADLINE_ENV: &str = "UNIAGENT_DOCKER_TEST_DEADLINE_SECS";

/// Deadline of each Docker call of the cleanup.
const CALL_DEADLINE: Duration = Duration::from_secs(20);

/// The labels (`key=value`) of the containers a test made.
type Owned = Arc<Mutex<Vec<String>>>;

tokio::task_local! {
    static OWNED: Owned;
}

/// Records that the running test's containers carry `label` (`key=value`); outside
/// [`deadline`] (or in a task it spawned) it does nothing.
pub fn track(label: String) {
    let _ = OWNED.try_with(|owned| {
        let mut owned = owned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !owned.contains(&label) {
            owned.push(label);
        }
    });
}

/// Records a docker run id ([`track`]).
pub fn track_run(run: &str) {
    track(format!("{LABEL_RUN_ID}={run}"));
}

/// Records a pool name ([`track`]).
pub fn track_pool(pool: &str) {
    track(format!("{LABEL_POOL}={pool}"));
}

/// The limit for a test whose own is `limit`: `$UNIAGENT_DOCKER_TEST_DEADLINE_SECS` if set.
pub fn limit_of(limit: Duration) -> Duration {
    std::env::var(DEADLINE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs > 0.0)
        .map_or(limit, Duration::from_secs_f64)
}

/// Runs `body` (test `test`) within `limit` ([`limit_of`]). When it panics or runs out of
/// time, removes the containers it made (see [`track`]) and fails naming the test and what
/// the cleanup removed and left.
pub async fn deadline(test: &str, limit: Duration, body: impl Future<Output = ()>) {
    let limit = limit_of(limit);
    let owned: Owned = Arc::default();
    let scoped = OWNED.scope(owned.clone(), AssertUnwindSafe(body).catch_unwind());
    let failure = match tokio::time::timeout(limit, scoped).await {
        Ok(Ok(())) => return,
        Ok(Err(panic)) => format!("panicked: {}", panic_message(&*panic)),
        // The body is dropped here: its deployments and pool processes clean up first.
        Err(_) => format!(
            "did not finish within its deadline of {limit:?} (${DEADLINE_ENV} overrides it)"
        ),
    };
    let labels = owned
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let (removed, left) = remove_labelled(&labels).await;
    panic!(
        "test `{test}` {failure}\ncleanup: removed {removed} container(s) of {labels:?}, \
         {left} left"
    );
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// Ids of the containers labelled `label` (any state); `None` when the daemon does not
/// answer within [`CALL_DEADLINE`] or fails.
pub async fn labelled(label: &str) -> Option<Vec<String>> {
    let docker = tokio::time::timeout(CALL_DEADLINE, engine())
        .await
        .ok()?
        .ok()?;
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![label.to_owned()],
        )])),
        ..Default::default()
    };
    let found = tokio::time::timeout(CALL_DEADLINE, docker.list_containers(Some(options)))
        .await
        .ok()?
        .ok()?;
    Some(found.into_iter().filter_map(|c| c.id).collect())
}

/// Force-removes every container labelled with one of `labels`, each call within
/// [`CALL_DEADLINE`]; returns how many were removed (or were gone by then) and how many are
/// still listed afterwards (or, when the daemon does not list them, were not removed).
pub async fn remove_labelled(labels: &[String]) -> (usize, usize) {
    let (mut removed, mut left) = (0, 0);
    let Some(docker) = tokio::time::timeout(CALL_DEADLINE, engine())
        .await
        .ok()
        .and_then(Result::ok)
    else {
        return (0, 0);
    };
    for label in labels {
        let Some(ids) = labelled(label).await else {
            eprintln!("cleanup: could not list the containers labelled {label}");
            continue;
        };
        let removals = ids.iter().map(|id| {
            let docker = docker.clone();
            async move {
                let options = RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                let call = docker.remove_container(id, Some(options));
                match tokio::time::timeout(CALL_DEADLINE, call).await {
                    Ok(Ok(())) => true,
                    // Gone already (a deployment's own cleanup got there first).
                    Ok(Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404,
                        ..
                    })) => true,
                    _ => false,
                }
            }
        });
        let results = futures::future::join_all(removals).await;
        let gone = results.iter().filter(|gone| **gone).count();
        removed += gone;
        // What is really left (a removal already under way may still finish).
        left += match labelled(label).await {
            Some(ids) => ids.len(),
            None => results.len() - gone,
        };
    }
    (removed, left)
}
