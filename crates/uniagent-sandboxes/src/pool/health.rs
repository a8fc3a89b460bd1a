//! Whether the pool's Docker daemon answers: a probe every [`PROBE_INTERVAL`] (a ping and a
//! one-container listing of the pool's own containers, together within [`PROBE_TIMEOUT`]).
//! After [`FAILURES_TO_UNHEALTHY`] failed probes in a row the pool is unhealthy: `/healthz`
//! says so, `POST /v1/leases` answers 503 `daemon_unavailable` (retryable) at once, requests
//! already waiting on a start are answered the same way, and no warm sandboxes are started.
//! One good probe makes it healthy again.
//!
//! The listing is part of the probe because a wedged daemon may still answer pings while every
//! call that touches containers hangs.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use bollard::query_parameters::ListContainersOptions;
use bollard::Docker;
use tokio::sync::watch;

use super::{Inner, Pool};
use crate::leases::LABEL_POOL;

/// How often the daemon is probed.
pub(super) const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Deadline of one probe (a ping and a listing): seconds, where a healthy daemon answers in
/// milliseconds even under the load of dozens of starts.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(4);

/// Failed probes in a row that make the pool unhealthy (one slow answer under load does not).
pub(super) const FAILURES_TO_UNHEALTHY: u32 = 2;

/// The daemon's state: `None` while it answers, else why not.
#[derive(Debug)]
pub(super) struct Health {
    state: watch::Sender<Option<String>>,
}

impl Health {
    pub(super) fn new() -> Self {
        Self {
            state: watch::channel(None).0,
        }
    }

    /// Why the daemon is considered unavailable, or `None` while it answers.
    pub(super) fn unhealthy(&self) -> Option<String> {
        self.state.borrow().clone()
    }

    /// Resolves (with why) once the daemon is considered unavailable; at once if it is now.
    pub(super) async fn became_unhealthy(&self) -> String {
        let mut state = self.state.subscribe();
        loop {
            if let Some(why) = state.borrow_and_update().clone() {
                return why;
            }
            if state.changed().await.is_err() {
                // The sender lives as long as the pool: never resolve without a reason.
                std::future::pending::<()>().await;
            }
        }
    }

    fn set(&self, why: Option<String>) {
        self.state.send_if_modified(|now| {
            if *now == why {
                return false;
            }
            match (&*now, &why) {
                (None, Some(reason)) => {
                    tracing::error!(%reason, "the Docker daemon does not answer: refusing new leases");
                }
                (Some(_), None) => tracing::info!("the Docker daemon answers again: taking leases"),
                _ => {}
            }
            *now = why;
            true
        });
    }
}

/// One probe: a ping and a listing of at most one of the pool's containers, within
/// [`PROBE_TIMEOUT`]; `Err(why)` when either fails or the deadline passes.
async fn probe(docker: &Docker, pool: &str) -> Result<(), String> {
    let calls = async {
        docker
            .ping()
            .await
            .map_err(|e| format!("ping failed: {e}"))?;
        let options = ListContainersOptions {
            all: true,
            limit: Some(1),
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("{LABEL_POOL}={pool}")],
            )])),
            ..Default::default()
        };
        docker
            .list_containers(Some(options))
            .await
            .map(|_| ())
            .map_err(|e| format!("listing containers failed: {e}"))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, calls).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// The probing task; it ends when the pool is dropped.
pub(super) async fn prober(weak: Weak<Inner>) {
    let mut failures = 0u32;
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = weak.upgrade().map(|inner| Pool { inner }) else {
            return;
        };
        let (docker, name) = (pool.inner.docker.clone(), pool.inner.config.name.clone());
        // Hold no strong reference across the probe's awaits.
        drop(pool);
        let answer = probe(&docker, &name).await;
        let Some(inner) = weak.upgrade() else { return };
        match answer {
            Ok(()) => {
                failures = 0;
                inner.health.set(None);
            }
            Err(why) => {
                failures += 1;
                tracing::warn!(failures, reason = %why, "a Docker daemon probe failed");
                if failures >= FAILURES_TO_UNHEALTHY {
                    inner.health.set(Some(format!(
                        "the Docker daemon failed {failures} probes in a row (last: {why})"
                    )));
                    // A waiting lease request learns of it through `became_unhealthy`.
                }
            }
        }
    }
}
