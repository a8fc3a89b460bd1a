//! One claim's life: created (a fresh name on `409`, retryable failures retried until the start
//! deadline), waited on through the shared watch until `Ready`, diagnosed while pending (the
//! Sandbox's scheduling, the pod's waiting reason), and deleted in the foreground.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use kube::Api;
use tokio::sync::watch;
use tokio::time::Instant;
use uniagent_core::{Error, Result};

use super::client::Connection;
use super::crd::{condition, ClaimedSandbox, Sandbox, SandboxClaim};
use super::errors::{sandbox, timeout, Failure};
use super::names::claim_name;
use super::render::{self, ClaimLabels};
use super::watch::{ClaimState, ClaimWatch};
use super::K8sConfig;

/// Claim reasons that end a start: the claim cannot become Ready.
const TERMINAL_REASONS: &[&str] = &[
    "InvalidMetadata",
    "EnvVarsInjectionRejected",
    "VolumeClaimTemplatesError",
    "ClaimExpired",
    "SandboxExpired",
    "AdoptionConflict",
];
/// Reasons that mean the configuration names objects that do not exist (after a grace period:
/// a template applied a moment ago may not be seen by the controller yet).
const MISSING_REASONS: &[&str] = &["TemplateNotFound", "WarmPoolNotFound"];
const MISSING_GRACE: Duration = Duration::from_secs(10);
/// First diagnosis of a pending claim, then every as long again.
const DIAGNOSE_EVERY: Duration = Duration::from_secs(5);

/// A created claim, followed through the shared watch.
#[derive(Debug)]
pub(super) struct Claim {
    /// Its name.
    pub(super) name: String,
    /// Its states.
    pub(super) states: watch::Receiver<ClaimState>,
}

/// Creates a claim on `pool`: a new name on a name clash, retryable failures retried with
/// `cfg.retry`'s backoff until `deadline`.
pub(super) async fn create(
    conn: &Connection,
    cfg: &K8sConfig,
    claims: &ClaimWatch,
    pool: &str,
    labels: &ClaimLabels,
    deadline: Instant,
) -> Result<Claim> {
    let api: Api<SandboxClaim> = Api::namespaced(conn.client.clone(), &cfg.namespace);
    loop {
        let name = claim_name(&labels.run_id);
        // Registered first: the claim's first event may arrive before `create` answers.
        let states = claims.register(&name);
        let shutdown = unix_now() + cfg.claim_ttl.as_secs() as i64;
        let object = render::claim(cfg, &name, pool, labels, shutdown)?;
        let post = PostParams::default();
        let created = conn
            .call_retrying(
                "create",
                "sandboxclaims",
                &cfg.namespace,
                &cfg.retry,
                deadline,
                || api.create(&post, &object),
            )
            .await;
        match created {
            Ok(_) => return Ok(Claim { name, states }),
            // A retried create whose first attempt went through finds its own claim; a clash
            // with someone else's takes a new name.
            Err((Failure::Conflict(_), _)) => {
                let existing = conn
                    .call("get", "sandboxclaims", &cfg.namespace, api.get_opt(&name))
                    .await
                    .ok()
                    .flatten();
                let owner = labels.owner_label();
                let ours = existing.is_some_and(|c| {
                    c.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(render::LABEL_OWNER))
                        == Some(&owner)
                });
                if ours {
                    return Ok(Claim { name, states });
                }
                claims.unregister(&name);
            }
            Err((_, error)) => {
                claims.unregister(&name);
                return Err(error);
            }
        }
    }
}

/// Waits until the claim is Ready with a sandbox name and pod IP, fails on a terminal reason, or
/// times out at `deadline` naming the last diagnosis.
pub(super) async fn wait_ready(
    conn: &Connection,
    cfg: &K8sConfig,
    claim: &mut Claim,
    deadline: Instant,
) -> Result<(ClaimedSandbox, Arc<SandboxClaim>)> {
    let started = Instant::now();
    let mut next_diagnosis = started + DIAGNOSE_EVERY;
    // The claim's own reason, and what the last diagnosis of its Sandbox and pod found.
    let mut diagnosis = String::from("the claim was not seen by the watch yet");
    let mut found_pending: Option<String> = None;
    loop {
        let state = claim.states.borrow_and_update().clone();
        match state {
            ClaimState::Deleted => {
                return Err(sandbox(
                    format!("claim `{}` was deleted while starting", claim.name),
                    true,
                ))
            }
            ClaimState::Present(object) => {
                if let Some(found) = ready(&object) {
                    return Ok((found, object));
                }
                if let Some(cond) = object
                    .status
                    .as_ref()
                    .and_then(|s| condition(&s.conditions, "Ready"))
                {
                    let reason = cond.reason.as_str();
                    if TERMINAL_REASONS.contains(&reason) {
                        return Err(terminal(&claim.name, reason, &cond.message));
                    }
                    if MISSING_REASONS.contains(&reason) && started.elapsed() >= MISSING_GRACE {
                        return Err(Error::config(format!(
                            "k8s: claim `{}`: {reason}: {}; check k8s.template or manage_templates",
                            claim.name, cond.message
                        )));
                    }
                    diagnosis = format!("{reason}: {}", cond.message);
                }
            }
            ClaimState::Unseen => {}
        }
        let now = Instant::now();
        if let Some(why) = found_pending
            .as_deref()
            .filter(|why| now >= deadline && why.starts_with("pod not scheduled"))
        {
            return Err(sandbox(
                format!("k8s unschedulable: claim `{}`: {why}", claim.name),
                true,
            ));
        }
        if now >= deadline {
            let also = found_pending
                .as_deref()
                .map(|why| format!("; {why}"))
                .unwrap_or_default();
            return Err(Error::Timeout {
                operation: format!(
                    "k8s claim `{}` becoming Ready (last: {diagnosis}{also})",
                    claim.name
                ),
                after: deadline.saturating_duration_since(started),
            });
        }
        if now >= next_diagnosis {
            next_diagnosis = now + DIAGNOSE_EVERY;
            let current = claim.states.borrow().clone();
            found_pending = diagnose(conn, cfg, &current).await?;
        }
        let wake = deadline.min(next_diagnosis);
        // A closed channel (the watch stopped) leaves only the deadline to wait for.
        let _ = tokio::time::timeout_at(wake, claim.states.changed()).await;
    }
}

/// The sandbox of a Ready claim.
pub(super) fn ready(claim: &SandboxClaim) -> Option<ClaimedSandbox> {
    let status = claim.status.as_ref()?;
    let cond = condition(&status.conditions, "Ready")?;
    let found = status.sandbox.as_ref()?;
    (cond.status == "True" && !found.name.is_empty() && !found.pod_ips.is_empty())
        .then(|| found.clone())
}

/// Why a Running claim is no longer usable; `None` while it is.
pub(super) fn lost(state: &ClaimState) -> Option<String> {
    match state {
        ClaimState::Unseen => None,
        ClaimState::Deleted => Some("its claim was deleted".into()),
        ClaimState::Present(claim) => {
            let status = claim.status.as_ref()?;
            if let Some(finished) = condition(&status.conditions, "Finished") {
                if finished.status == "True" {
                    return Some(format!("the sandbox finished: {}", finished.message));
                }
            }
            let ready = condition(&status.conditions, "Ready")?;
            (ready.status != "True").then(|| format!("{}: {}", ready.reason, ready.message))
        }
    }
}

/// Deletes the claim in the foreground and waits for it to be gone, up to `delete_timeout`
/// (after which `shutdownTime` and the reaper remain).
pub(super) async fn delete(conn: &Connection, cfg: &K8sConfig, claim: &mut Claim) -> Result<()> {
    delete_now(conn, &cfg.namespace, &claim.name).await?;
    let deadline = Instant::now() + cfg.delete_timeout;
    loop {
        if matches!(*claim.states.borrow_and_update(), ClaimState::Deleted) {
            return Ok(());
        }
        match tokio::time::timeout_at(deadline, claim.states.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return Err(timeout("claim deletion", cfg.delete_timeout)),
        }
    }
}

/// Deletes a claim by name in the foreground without waiting for it to be gone (also for drops
/// and cancelled starts).
pub(super) async fn delete_now(conn: &Connection, namespace: &str, name: &str) -> Result<()> {
    let api: Api<SandboxClaim> = Api::namespaced(conn.client.clone(), namespace);
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    match conn
        .call(
            "delete",
            "sandboxclaims",
            namespace,
            api.delete(name, &params),
        )
        .await
    {
        Ok(_) | Err((Failure::NotFound(_), _)) => Ok(()),
        Err((_, error)) => Err(error),
    }
}

fn terminal(name: &str, reason: &str, message: &str) -> Error {
    match reason {
        "ClaimExpired" | "SandboxExpired" => {
            sandbox(format!("claim `{name}` expired: {message}"), true)
        }
        _ => Error::internal(format!("k8s refused claim `{name}`: {reason}: {message}")),
    }
}

/// What holds a pending claim up: the Sandbox's scheduling and the pod's waiting reason. An
/// image that cannot be pulled ends the start.
async fn diagnose(
    conn: &Connection,
    cfg: &K8sConfig,
    state: &ClaimState,
) -> Result<Option<String>> {
    let ClaimState::Present(claim) = state else {
        return Ok(None);
    };
    let Some(name) = claim
        .status
        .as_ref()
        .and_then(|s| s.sandbox.as_ref())
        .map(|s| s.name.clone())
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    let sandboxes: Api<Sandbox> = Api::namespaced(conn.client.clone(), &cfg.namespace);
    let mut found = None;
    if let Ok(Some(sb)) = conn
        .call("get", "sandboxes", &cfg.namespace, sandboxes.get_opt(&name))
        .await
    {
        if let Some(cond) = sb
            .status
            .as_ref()
            .and_then(|s| condition(&s.conditions, "PodScheduled"))
        {
            if cond.status == "False" {
                found = Some(format!(
                    "pod not scheduled: {}: {}",
                    cond.reason, cond.message
                ));
            }
        }
    }
    let pods: Api<Pod> = Api::namespaced(conn.client.clone(), &cfg.namespace);
    if let Ok(Some(pod)) = conn
        .call("get", "pods", &cfg.namespace, pods.get_opt(&name))
        .await
    {
        let waiting = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
            .find_map(|w| Some((w.reason.clone()?, w.message.clone().unwrap_or_default())));
        if let Some((reason, message)) = waiting {
            match reason.as_str() {
                "ErrImagePull" | "ImagePullBackOff" => {
                    return Err(sandbox(
                        format!("k8s image_pull_failed: sandbox `{name}`: {reason}: {message}"),
                        false,
                    ))
                }
                "InvalidImageName" => {
                    return Err(Error::config(format!(
                        "k8s: sandbox `{name}`: invalid image name: {message}"
                    )))
                }
                _ => found = Some(format!("container waiting: {reason}: {message}")),
            }
        }
    }
    Ok(found)
}

/// Seconds since the epoch.
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
