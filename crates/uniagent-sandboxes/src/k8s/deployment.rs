//! [`K8sDeployment`]: one `SandboxClaim` per sandbox, its server reached by pod IP or through
//! the agent-sandbox router with a token minted for that sandbox alone.

use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::Api;
use tokio::sync::Mutex;
use tokio::time::Instant;
use uniagent_core::sandbox::*;
use uniagent_core::{Error, Result};

use super::claims::{self, Claim};
use super::client::{connect, Connection};
use super::crd::{ClaimedSandbox, SandboxClaim};
use super::ensure::pool_for;
use super::errors::{sandbox, Failure, BACKEND};
#[cfg(feature = "k8s-port-forward")]
use super::forward::PortForward;
use super::render::{rfc3339, ClaimLabels, SERVER_PORT};
use super::watch::ClaimWatch;
use super::{K8sConfig, OnColdStart, Reach};
use crate::client::{RemoteRuntime, RemoteRuntimeOptions};
use crate::lifecycle::{impl_deployment_over_runtime, not_running, Phase};
use crate::signed_token::Minter;

/// A sandbox claimed from an agent-sandbox warm pool.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use std::time::Duration;
///
/// use uniagent_core::{Deployment, DeploymentExt};
/// use uniagent_sandboxes::k8s::{K8sConfig, K8sDeployment};
///
/// let sandbox = K8sDeployment::new(K8sConfig {
///     image: "python:3.12-slim".into(),
///     carrier_image: "registry.example/uniagent-sandbox-carrier:0.1".into(),
///     signing_key_file: Some("/etc/uniagent/signing-key".into()),
///     ..K8sConfig::default()
/// })?;
/// sandbox.start().await?;
/// assert_eq!(sandbox.sh("echo hi", Duration::from_secs(10)).await?.stdout, "hi\n");
/// sandbox.stop().await?; // also happens on drop
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct K8sDeployment {
    config: K8sConfig,
    minter: Arc<Minter>,
    labels: ClaimLabels,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Idle(Phase),
    Running(Box<Held>),
}

#[derive(Debug)]
struct Held {
    conn: Connection,
    claim: Claim,
    sandbox: ClaimedSandbox,
    runtime: RemoteRuntime,
    lost: Arc<StdMutex<Option<String>>>,
    renewer: tokio::task::JoinHandle<()>,
    /// The run's shared watch (kept alive while this sandbox runs).
    watch: ClaimWatch,
    /// The local port-forward (`reach: port_forward`), closed with the sandbox.
    _forward: Option<PortForward>,
    timings: StartTimings,
}

/// Where a running sandbox is, for inspection and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct K8sInfo {
    /// The claim's name.
    pub claim: String,
    /// The Sandbox's (and its pod's) name.
    pub sandbox: String,
    /// The pod's IPs.
    pub pod_ips: Vec<String>,
    /// The URL the server is reached at.
    pub url: String,
    /// Where the start's time went.
    pub timings: StartTimings,
}

/// Where a start's time went, step by step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StartTimings {
    /// Connecting and applying the template and pool (nothing after the first start).
    pub ensure: Duration,
    /// Creating the claim (the API request).
    pub create: Duration,
    /// From the created claim to its Ready event: the cluster's part (controller, watch).
    pub ready: Duration,
    /// Minting the token, building the client and the first `is_alive`.
    pub probe: Duration,
}

impl K8sDeployment {
    /// A deployment that will claim a sandbox as `config` says. Fails when the configuration
    /// is invalid or the signing key cannot be read.
    pub fn new(config: K8sConfig) -> Result<Self> {
        Self::for_rollout(config, None)
    }

    /// As [`new`](Self::new), labelling the claim with the rollout it serves.
    pub fn for_rollout(config: K8sConfig, rollout: Option<String>) -> Result<Self> {
        config.check()?;
        if config.reach == Reach::PortForward && !cfg!(feature = "k8s-port-forward") {
            return Err(port_forward_missing());
        }
        let path = config.signing_key_file.clone().unwrap_or_default();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::config(format!("k8s.signing_key_file `{}`: {e}", path.display()))
        })?;
        let minter = Minter::from_seed_base64(text.trim()).map_err(|e| {
            Error::config(format!("k8s.signing_key_file `{}`: {e}", path.display()))
        })?;
        let labels = ClaimLabels {
            run_id: crate::owner::run_id(config.run_id.as_deref()),
            rollout,
            owner: crate::owner::Owner::current(),
        };
        Ok(Self {
            config,
            minter: Arc::new(minter),
            labels,
            state: Mutex::new(State::Idle(Phase::New)),
        })
    }

    /// The claim and sandbox of the running deployment; `None` unless started.
    pub async fn info(&self) -> Option<K8sInfo> {
        match &*self.state.lock().await {
            State::Running(held) => Some(K8sInfo {
                claim: held.claim.name.clone(),
                sandbox: held.sandbox.name.clone(),
                pod_ips: held.sandbox.pod_ips.clone(),
                url: held.runtime.url().to_owned(),
                timings: held.timings,
            }),
            State::Idle(_) => None,
        }
    }

    async fn runtime(&self, operation: &str) -> Result<RemoteRuntime> {
        match &*self.state.lock().await {
            State::Running(held) => {
                let lost = held
                    .lost
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
                    .or_else(|| claims::lost(&held.claim.states.borrow()));
                match lost {
                    None => Ok(held.runtime.clone()),
                    Some(why) => Err(sandbox(
                        format!("cannot {operation}: sandbox lost: {why}"),
                        false,
                    )),
                }
            }
            State::Idle(phase) => Err(not_running(BACKEND, *phase, operation)),
        }
    }

    async fn do_start(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        match &*state {
            State::Running(_) => return Ok(()),
            State::Idle(Phase::Stopped) => {
                return Err(not_running(BACKEND, Phase::Stopped, "start"))
            }
            State::Idle(_) => {}
        }
        let cfg = &self.config;
        let began = Instant::now();
        let deadline = began + cfg.start_timeout;
        let conn = connect(cfg).await?;
        super::reaper::reap_stale_once(&conn, &cfg.namespace).await;
        let watch = ClaimWatch::shared(&conn, &cfg.namespace, &self.labels.run_id);
        let pool = pool_for(&conn, cfg, &cfg.image, deadline).await?;
        let ensured = Instant::now();
        let mut claim = claims::create(&conn, cfg, &watch, &pool, &self.labels, deadline).await?;
        let created = Instant::now();
        // From here on the claim is ours: a failure or a cancelled start deletes it.
        let mut guard = DeleteOnDrop(Some(Doomed {
            conn: conn.clone(),
            namespace: cfg.namespace.clone(),
            name: claim.name.clone(),
        }));
        let started = async {
            let (found, _) = claims::wait_ready(&conn, cfg, &mut claim, deadline).await?;
            let ready = Instant::now();
            if cfg.on_cold_start == OnColdStart::Fail
                && cfg.warm > 0
                && cold(&conn, cfg, &found).await
            {
                return Err(sandbox(
                    format!(
                        "k8s pool_drained: claim `{}` was served by a cold start",
                        claim.name
                    ),
                    true,
                ));
            }
            #[cfg(feature = "k8s-port-forward")]
            let forward = match cfg.reach {
                Reach::PortForward => {
                    Some(PortForward::start(&conn, &cfg.namespace, &found.name).await?)
                }
                _ => None,
            };
            #[cfg(not(feature = "k8s-port-forward"))]
            let forward = None::<PortForward>;
            let runtime = self.runtime_for(&found, forward.as_ref())?;
            runtime.wait_until_alive(cfg.probe_timeout).await?;
            Ok((found, runtime, ready, forward))
        }
        .await;
        let (found, runtime, ready, forward) = match started {
            Ok(ok) => ok,
            Err(error) => {
                guard.0 = None;
                let _ = claims::delete(&conn, cfg, &mut claim).await;
                watch.unregister(&claim.name);
                return Err(error);
            }
        };
        let lost = Arc::new(StdMutex::new(None));
        let renewer = tokio::spawn(renew(
            conn.clone(),
            cfg.clone(),
            claim.name.clone(),
            lost.clone(),
        ));
        guard.0 = None;
        let timings = StartTimings {
            ensure: ensured - began,
            create: created - ensured,
            ready: ready - created,
            probe: ready.elapsed(),
        };
        *state = State::Running(Box::new(Held {
            conn,
            claim,
            sandbox: found,
            runtime,
            lost,
            renewer,
            watch,
            _forward: forward,
            timings,
        }));
        Ok(())
    }

    fn runtime_for(
        &self,
        found: &ClaimedSandbox,
        forward: Option<&PortForward>,
    ) -> Result<RemoteRuntime> {
        let cfg = &self.config;
        let exp = claims::unix_now().max(0) as u64 + cfg.max_lifetime.as_secs();
        let token = self.minter.mint(&found.name, exp, &cfg.key_id);
        let mut options = RemoteRuntimeOptions {
            backend: BACKEND.into(),
            request_timeout: cfg.api_timeout.max(Duration::from_secs(60)),
            retry: cfg.retry.clone(),
            ..RemoteRuntimeOptions::default()
        };
        let url = match cfg.reach {
            Reach::PodIp => {
                let ip = found
                    .pod_ips
                    .first()
                    .map(String::as_str)
                    .unwrap_or_default();
                if ip.contains(':') {
                    format!("http://[{ip}]:{SERVER_PORT}")
                } else {
                    format!("http://{ip}:{SERVER_PORT}")
                }
            }
            Reach::Router => {
                options.extra_headers = vec![
                    ("X-Sandbox-ID".into(), found.name.clone()),
                    ("X-Sandbox-Namespace".into(), cfg.namespace.clone()),
                    ("X-Sandbox-Port".into(), SERVER_PORT.to_string()),
                ];
                if let Some(var) = &cfg.router_token_env {
                    let bearer = std::env::var(var).map_err(|_| {
                        Error::config(format!(
                            "k8s.router_token_env names `{var}`, which is not set"
                        ))
                    })?;
                    options
                        .extra_headers
                        .push(("Authorization".into(), format!("Bearer {bearer}")));
                }
                cfg.router_url.clone().unwrap_or_default()
            }
            Reach::PortForward => match forward {
                Some(forward) => forward.url(),
                None => return Err(port_forward_missing()),
            },
        };
        RemoteRuntime::new(&url, Some(token), options)
    }

    async fn do_stop(&self) -> Result<()> {
        let previous =
            std::mem::replace(&mut *self.state.lock().await, State::Idle(Phase::Stopped));
        let State::Running(mut held) = previous else {
            return Ok(());
        };
        held.renewer.abort();
        if claims::lost(&held.claim.states.borrow()).is_none() {
            let _ = tokio::time::timeout(Duration::from_secs(2), held.runtime.close()).await;
        }
        let result = claims::delete(&held.conn, &self.config, &mut held.claim).await;
        held.watch.unregister(&held.claim.name);
        if let Err(error) = result {
            // Not an error of `stop`: the claim's shutdownTime and the reaper remain.
            tracing::warn!(claim = %held.claim.name, %error, "could not confirm a claim's deletion");
        }
        Ok(())
    }
}

impl Drop for K8sDeployment {
    fn drop(&mut self) {
        if let State::Running(held) =
            std::mem::replace(self.state.get_mut(), State::Idle(Phase::Stopped))
        {
            held.renewer.abort();
            held.watch.unregister(&held.claim.name);
            drop(DeleteOnDrop(Some(Doomed {
                conn: held.conn.clone(),
                namespace: self.config.namespace.clone(),
                name: held.claim.name.clone(),
            })));
        }
    }
}

/// A claim to delete from a `Drop` (a dropped deployment, a cancelled start).
struct Doomed {
    conn: Connection,
    namespace: String,
    name: String,
}

struct DeleteOnDrop(Option<Doomed>);

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let Some(doomed) = self.0.take() else {
            return;
        };
        // A client of its own on the fresh runtime: the caller's may be shutting down.
        crate::blocking::block_on_own_thread(async move {
            let conn = match kube::Client::try_from(doomed.conn.config.clone()) {
                Ok(client) => Connection {
                    client,
                    ..doomed.conn
                },
                Err(error) => {
                    tracing::warn!(claim = %doomed.name, %error, "cannot delete a dropped claim; its shutdownTime ends it");
                    return;
                }
            };
            if let Err(error) = claims::delete_now(&conn, &doomed.namespace, &doomed.name).await {
                tracing::warn!(claim = %doomed.name, %error, "cannot delete a dropped claim; its shutdownTime ends it");
            }
        });
    }
}

/// Renews the claim's `shutdownTime` every third of `claim_ttl`; marks the sandbox lost when the
/// claim is gone or no renewal got through before the last `shutdownTime`.
async fn renew(
    conn: Connection,
    cfg: K8sConfig,
    name: String,
    lost: Arc<StdMutex<Option<String>>>,
) {
    let api: Api<SandboxClaim> = Api::namespaced(conn.client.clone(), &cfg.namespace);
    let period = cfg.claim_ttl / 3;
    let mut expires = Instant::now() + cfg.claim_ttl;
    loop {
        tokio::time::sleep(period).await;
        let until = claims::unix_now() + cfg.claim_ttl.as_secs() as i64;
        let Ok(time) = rfc3339(until) else {
            continue;
        };
        let patch = serde_json::json!({"spec": {"lifecycle": {"shutdownTime": time}}});
        let result = conn
            .call(
                "patch",
                "sandboxclaims",
                &cfg.namespace,
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await;
        let why = match result {
            Ok(_) => {
                expires = Instant::now() + cfg.claim_ttl;
                continue;
            }
            Err((Failure::NotFound(_), _)) => "its claim is gone".to_owned(),
            Err((_, error)) if Instant::now() + period >= expires => {
                format!("its claim could not be renewed before it expired: {error}")
            }
            Err((_, error)) => {
                tracing::warn!(claim = %name, %error, "renewing a claim failed; retrying");
                continue;
            }
        };
        *lost.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
        return;
    }
}

/// Whether the claim's sandbox was cold-started (its launch-type label says so).
async fn cold(conn: &Connection, cfg: &K8sConfig, found: &ClaimedSandbox) -> bool {
    let api: Api<super::crd::Sandbox> = Api::namespaced(conn.client.clone(), &cfg.namespace);
    match conn
        .call("get", "sandboxes", &cfg.namespace, api.get_opt(&found.name))
        .await
    {
        Ok(Some(sb)) => sb
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(super::crd::LABEL_LAUNCH_TYPE))
            .is_some_and(|t| t == "cold"),
        _ => false,
    }
}

/// A build without the port-forward: nothing to forward with.
#[cfg(not(feature = "k8s-port-forward"))]
#[derive(Debug)]
enum PortForward {}

#[cfg(not(feature = "k8s-port-forward"))]
impl PortForward {
    fn url(&self) -> String {
        match *self {}
    }
}

fn port_forward_missing() -> Error {
    Error::config(
        "k8s.reach: port_forward needs uniagent built with the `k8s-port-forward` feature",
    )
}

impl_deployment_over_runtime!(K8sDeployment, BACKEND);
