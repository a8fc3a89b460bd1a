//! Keeping a lease: renewal in the background while the rollout runs, and release.

use std::sync::Mutex;
use std::time::Duration;

use hyper::{Method, StatusCode};
use tokio::time::Instant;

use super::http::Control;
use crate::leases::RenewRequest;

/// Whether the lease still holds, shared by the renewer and the deployment.
#[derive(Debug, Default)]
pub(crate) struct LeaseStatus {
    lost: Mutex<Option<String>>,
}

impl LeaseStatus {
    /// Why the lease was lost, if it was.
    pub(crate) fn lost(&self) -> Option<String> {
        self.lost
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn lose(&self, why: String) {
        tracing::warn!(reason = %why, "a sandbox lease was lost");
        *self
            .lost
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
    }
}

/// The lease `id` at `endpoint`, with the token its routes take.
#[derive(Debug, Clone)]
pub(crate) struct LeaseRef {
    pub endpoint: String,
    pub id: String,
    pub token: String,
}

impl LeaseRef {
    fn url(&self, suffix: &str) -> String {
        format!("{}/v1/leases/{}{suffix}", self.endpoint, self.id)
    }
}

/// Renews every third of `ttl` until the task is aborted; marks the lease lost when the pool
/// says it is gone, or when no renewal succeeded before the lease would have expired (the
/// pool is down or unreachable).
pub(crate) async fn renew_until_aborted(
    control: Control,
    lease: LeaseRef,
    ttl: Duration,
    expires: Instant,
    status: std::sync::Arc<LeaseStatus>,
) {
    let body = serde_json::to_vec(&RenewRequest {
        ttl_secs: Some(ttl.as_secs_f64()),
    })
    .unwrap_or_default();
    let every = (ttl / 3).max(Duration::from_millis(100));
    // A renewal must answer before the lease runs out to be of any use.
    let control = control.with_timeout(every.max(Duration::from_secs(1)));
    let mut expires = expires;
    loop {
        tokio::time::sleep(every).await;
        let sent = Instant::now();
        let answer = control
            .send(
                Method::POST,
                &lease.url("/renew"),
                Some(&lease.token),
                Some(body.clone()),
            )
            .await;
        match answer {
            Ok(answer) if answer.status == StatusCode::OK => expires = sent + ttl,
            Ok(answer) if answer.status == StatusCode::NOT_FOUND => {
                let (_, message) = answer.error();
                status.lose(format!(
                    "pool {} no longer holds lease {}: {message}",
                    lease.endpoint, lease.id
                ));
                return;
            }
            failed => {
                let why = match failed {
                    Ok(answer) => answer.error().1,
                    Err(why) => why,
                };
                if Instant::now() >= expires {
                    status.lose(format!(
                        "lease {} expired: pool {} could not be reached to renew it ({why})",
                        lease.id, lease.endpoint
                    ));
                    return;
                }
                tracing::debug!(lease = %lease.id, reason = %why, "a lease renewal failed; retrying");
            }
        }
    }
}

/// Releases the lease; a lease the pool no longer has counts as released.
pub(crate) async fn release(control: &Control, lease: &LeaseRef) -> Result<(), String> {
    let answer = control
        .send(Method::DELETE, &lease.url(""), Some(&lease.token), None)
        .await?;
    if answer.status.is_success() || answer.status == StatusCode::NOT_FOUND {
        Ok(())
    } else {
        Err(answer.error().1)
    }
}

/// [`release`] from synchronous code (a `Drop`): on a fresh thread with its own runtime and
/// client, waited for at most `timeout`.
pub(crate) fn release_blocking(api_key: Option<String>, lease: LeaseRef, timeout: Duration) {
    crate::blocking::block_on_own_thread(async move {
        let control = Control::new(timeout, api_key);
        if let Err(why) = release(&control, &lease).await {
            tracing::warn!(lease = %lease.id, reason = %why, "could not release a dropped lease; it expires on its own");
        }
    });
}
