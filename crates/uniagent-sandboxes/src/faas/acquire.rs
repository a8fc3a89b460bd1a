//! Getting a lease from one of several pools: least loaded first (by `GET /v1/capacity`), the
//! next one when a pool is full, down or does not serve the image, and rounds of that with
//! backoff until [`RetryConfig`] gives up.

use std::time::Duration;

use futures::future::join_all;
use hyper::{Method, StatusCode};
use tokio::time::Instant;
use uniagent_core::{Error, Result, RetryConfig};

use super::http::Control;
use crate::leases::{AcquireRequest, Capacity, ErrorKind, Lease};

/// The deadline of one capacity probe: a pool slower than this counts as down for the round.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why one pool did not grant a lease.
#[derive(Debug)]
struct Refusal {
    endpoint: String,
    why: String,
    /// Another round may succeed (full, down, starting failed).
    retryable: bool,
}

/// Pools that answered the capacity probe, most available first; those that did not answer
/// come back as refusals.
async fn rank(control: &Control, endpoints: &[String]) -> (Vec<String>, Vec<Refusal>) {
    let probe = control.with_timeout(PROBE_TIMEOUT.min(control.timeout()));
    let probes = join_all(endpoints.iter().map(|endpoint| {
        let probe = probe.clone();
        async move {
            let answer = probe
                .send(Method::GET, &format!("{endpoint}/v1/capacity"), None, None)
                .await;
            // Ok(Ok): up; Ok(Err): answered but refused (a wrong key); Err: down.
            let capacity = answer.and_then(|a| {
                if a.status == StatusCode::OK {
                    a.json::<Capacity>().map(Ok)
                } else if a.status.is_client_error() {
                    Ok(Err(a.error().1))
                } else {
                    Err(a.error().1)
                }
            });
            (endpoint.clone(), capacity)
        }
    }))
    .await;
    let mut up = Vec::new();
    let mut down = Vec::new();
    for (endpoint, capacity) in probes {
        match capacity {
            // A random tie-break spreads clients over equally loaded pools.
            Ok(Ok(capacity)) => up.push((capacity.available, fastrand::u32(..), endpoint)),
            Ok(Err(why)) => down.push(Refusal {
                endpoint,
                why: format!("refused: {why}"),
                retryable: false,
            }),
            Err(why) => down.push(Refusal {
                endpoint,
                why: format!("unreachable: {why}"),
                retryable: true,
            }),
        }
    }
    up.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    (up.into_iter().map(|(_, _, e)| e).collect(), down)
}

/// Asks pools in order until one grants `request`; returns the pool's endpoint and the lease.
pub(crate) async fn acquire(
    control: &Control,
    endpoints: &[String],
    request: &AcquireRequest,
    retry: &RetryConfig,
) -> Result<(String, Lease)> {
    let body = serde_json::to_vec(request)
        .map_err(|e| Error::internal(format!("encoding a lease request: {e}")))?;
    let started = Instant::now();
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let (order, mut refusals) = rank(control, endpoints).await;
        for endpoint in order {
            let answer = control
                .send(
                    Method::POST,
                    &format!("{endpoint}/v1/leases"),
                    None,
                    Some(body.clone()),
                )
                .await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(why) => {
                    refusals.push(Refusal {
                        endpoint,
                        why: format!("unreachable: {why}"),
                        retryable: true,
                    });
                    continue;
                }
            };
            if answer.status == StatusCode::CREATED {
                let lease: Lease = answer.json().map_err(|why| protocol(&endpoint, why))?;
                return Ok((endpoint, lease));
            }
            let (kind, message) = answer.error();
            match kind {
                Some(
                    ErrorKind::CapacityExhausted
                    | ErrorKind::StartFailed
                    | ErrorKind::ShuttingDown
                    | ErrorKind::DaemonUnavailable,
                ) => refusals.push(Refusal {
                    endpoint,
                    why: message,
                    retryable: true,
                }),
                // Another pool may serve the image.
                Some(ErrorKind::UnknownImage) => refusals.push(Refusal {
                    endpoint,
                    why: message,
                    retryable: false,
                }),
                // The request itself is wrong: no pool will take it.
                Some(_) => return Err(refused(request, &endpoint, &message)),
                None if answer.status.is_server_error() => refusals.push(Refusal {
                    endpoint,
                    why: message,
                    retryable: true,
                }),
                None => return Err(protocol(&endpoint, message)),
            }
        }
        let retryable = refusals.iter().any(|r| r.retryable);
        let next = retry.delay(attempt);
        let out_of_time = started.elapsed() + next > retry.max_elapsed;
        if !retryable || attempt >= retry.max_attempts || out_of_time {
            let detail = refusals
                .iter()
                .map(|r| format!("{}: {}", r.endpoint, r.why))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(Error::Sandbox {
                backend: super::BACKEND.into(),
                message: format!(
                    "no pool granted a lease for `{}` after {attempt} round(s): {detail}",
                    request.image
                ),
                retryable,
                source: None,
            });
        }
        tokio::time::sleep(next).await;
    }
}

fn refused(request: &AcquireRequest, endpoint: &str, message: &str) -> Error {
    Error::Sandbox {
        backend: super::BACKEND.into(),
        message: format!(
            "pool {endpoint} refused a lease for `{}`: {message}",
            request.image
        ),
        retryable: false,
        source: None,
    }
}

fn protocol(endpoint: &str, why: String) -> Error {
    Error::Sandbox {
        backend: super::BACKEND.into(),
        message: format!("pool {endpoint} answered out of protocol: {why}"),
        retryable: false,
        source: None,
    }
}
