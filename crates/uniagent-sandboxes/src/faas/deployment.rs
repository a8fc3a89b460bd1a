//! The `faas` backend's deployment (feature `faas`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use uniagent_core::sandbox::*;
use uniagent_core::{Error, Result};

use super::renew::{LeaseRef, LeaseStatus};
use super::{acquire, http, renew, BACKEND};
use crate::client::{RemoteRuntime, RemoteRuntimeOptions};
use crate::config::FaasConfig;
use crate::leases::{AcquireRequest, Lease, Limits};
use crate::lifecycle::{impl_deployment_over_runtime, not_running, Phase};

/// How long `stop` and a drop wait for the pool to confirm a release.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// A sandbox leased from a pool.
#[derive(Debug)]
pub struct FaasDeployment {
    config: FaasConfig,
    endpoints: Vec<String>,
    api_key: Option<String>,
    control: http::Control,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Idle(Phase),
    Running(Box<Held>),
}

#[derive(Debug)]
struct Held {
    lease: Lease,
    at: LeaseRef,
    runtime: RemoteRuntime,
    status: Arc<LeaseStatus>,
    renewer: tokio::task::JoinHandle<()>,
}

/// Where a running faas deployment's sandbox is, for inspection and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct FaasInfo {
    /// The pool that granted the lease.
    pub endpoint: String,
    /// The lease (its token redacted in `Debug`).
    pub lease: Lease,
}

impl FaasDeployment {
    /// A deployment that will lease a sandbox as `config` says. Fails when the configuration
    /// is invalid or `api_key_env` names an unset variable.
    pub fn new(config: FaasConfig) -> Result<Self> {
        crate::config::BackendConfig::validate(&config)?;
        let api_key = match &config.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| Error::Config {
                message: format!("faas.api_key_env names `{var}`, which is not set"),
                source: None,
            })?),
            None => None,
        };
        Ok(Self {
            endpoints: config.all_endpoints(),
            control: http::Control::new(config.timeout, api_key.clone()),
            api_key,
            config,
            state: Mutex::new(State::Idle(Phase::New)),
        })
    }

    /// The pool and lease of the running sandbox; `None` unless started.
    pub async fn info(&self) -> Option<FaasInfo> {
        match &*self.state.lock().await {
            State::Running(held) => Some(FaasInfo {
                endpoint: held.at.endpoint.clone(),
                lease: held.lease.clone(),
            }),
            State::Idle(_) => None,
        }
    }

    async fn runtime(&self, operation: &str) -> Result<RemoteRuntime> {
        match &*self.state.lock().await {
            State::Running(held) => match held.status.lost() {
                None => Ok(held.runtime.clone()),
                Some(why) => Err(Error::Sandbox {
                    backend: BACKEND.into(),
                    message: format!("cannot {operation}: {why}"),
                    retryable: false,
                    source: None,
                }),
            },
            State::Idle(phase) => Err(not_running(BACKEND, *phase, operation)),
        }
    }

    fn request(&self) -> AcquireRequest {
        let limits = Limits {
            memory_bytes: self.config.memory_bytes,
            cpus: self.config.cpus,
            pids_limit: self.config.pids_limit,
        };
        AcquireRequest {
            image: self.config.image.clone(),
            ttl_secs: Some(self.config.lease_ttl.as_secs_f64()),
            limits: (!limits.is_empty()).then_some(limits),
            client: Some(format!("pid {}", std::process::id())),
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
        let (endpoint, lease) = acquire::acquire(
            &self.control,
            &self.endpoints,
            &self.request(),
            &self.config.retry,
        )
        .await?;
        let at = LeaseRef {
            endpoint: endpoint.clone(),
            id: lease.id.clone(),
            token: lease.token.clone(),
        };
        // From here on the lease is ours: a failure (or a cancelled start) releases it.
        let mut guard = ReleaseOnDrop(Some((self.api_key.clone(), at.clone())));
        let runtime = RemoteRuntime::new(
            &format!("{endpoint}{}", lease.sandbox_path),
            Some(lease.token.clone()),
            RemoteRuntimeOptions {
                backend: BACKEND.into(),
                request_timeout: self.config.timeout,
                retry: self.config.retry.clone(),
                ..RemoteRuntimeOptions::default()
            },
        )?;
        runtime.wait_until_alive(self.config.timeout).await?;
        let status = Arc::new(LeaseStatus::default());
        let remaining = Duration::from_secs_f64(
            (lease.expires_at - crate::leases::unix_now()).clamp(0.0, lease.ttl_secs),
        );
        let renewer = tokio::spawn(renew::renew_until_aborted(
            self.control.clone(),
            at.clone(),
            self.config.lease_ttl,
            tokio::time::Instant::now() + remaining,
            status.clone(),
        ));
        guard.0 = None;
        *state = State::Running(Box::new(Held {
            lease,
            at,
            runtime,
            status,
            renewer,
        }));
        Ok(())
    }

    async fn do_stop(&self) -> Result<()> {
        let previous =
            std::mem::replace(&mut *self.state.lock().await, State::Idle(Phase::Stopped));
        let State::Running(held) = previous else {
            return Ok(());
        };
        held.renewer.abort();
        // Sessions first, so shells end their jobs the polite way; a gone sandbox is no error.
        if held.status.lost().is_none() {
            let _ = tokio::time::timeout(Duration::from_secs(2), held.runtime.close()).await;
        }
        let control = self.control.with_timeout(RELEASE_TIMEOUT);
        if let Err(why) = renew::release(&control, &held.at).await {
            // Not an error of `stop`: the pool reaps the lease when its TTL runs out.
            tracing::warn!(lease = %held.at.id, reason = %why, "could not release a lease; it expires on its own");
        }
        Ok(())
    }
}

impl Drop for FaasDeployment {
    fn drop(&mut self) {
        if let State::Running(held) =
            std::mem::replace(self.state.get_mut(), State::Idle(Phase::Stopped))
        {
            held.renewer.abort();
            renew::release_blocking(self.api_key.clone(), held.at.clone(), RELEASE_TIMEOUT);
        }
    }
}

/// Releases a lease whose start did not complete.
struct ReleaseOnDrop(Option<(Option<String>, LeaseRef)>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some((api_key, lease)) = self.0.take() {
            renew::release_blocking(api_key, lease, RELEASE_TIMEOUT);
        }
    }
}

impl_deployment_over_runtime!(FaasDeployment, BACKEND);
