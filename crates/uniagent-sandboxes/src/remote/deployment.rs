//! The `remote` backend's deployment (feature `remote`).

use tokio::sync::Mutex;
use uniagent_core::sandbox::*;
use uniagent_core::{Error, Result};

use crate::client::{RemoteRuntime, RemoteRuntimeOptions};
use crate::config::RemoteConfig;
use crate::lifecycle::{impl_deployment_over_runtime, not_running, Phase};

const BACKEND: &str = "remote";

/// A sandbox server someone else runs.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use std::time::Duration;
///
/// use uniagent_core::{Deployment, DeploymentExt};
/// use uniagent_sandboxes::{RemoteConfig, RemoteDeployment};
///
/// let config = RemoteConfig { url: "http://127.0.0.1:8000".into(), auth_token: Some("secret".into()), ..RemoteConfig::default() };
/// let sandbox = RemoteDeployment::new(config)?;
/// sandbox.start().await?;
/// let out = sandbox.sh("echo hi", Duration::from_secs(10)).await?;
/// assert_eq!(out.stdout, "hi\n");
/// sandbox.stop().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RemoteDeployment {
    config: RemoteConfig,
    runtime: RemoteRuntime,
    phase: Mutex<Phase>,
}

impl RemoteDeployment {
    /// A deployment for the server in `config`. The token is `auth_token`, else the value of
    /// the environment variable `auth_token_env`, else none.
    pub fn new(config: RemoteConfig) -> Result<Self> {
        let token = match (&config.auth_token, &config.auth_token_env) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(var)) => Some(std::env::var(var).map_err(|_| Error::Config {
                message: format!("remote.auth_token_env names `{var}`, which is not set"),
                source: None,
            })?),
            (None, None) => None,
        };
        let options = RemoteRuntimeOptions {
            backend: BACKEND.into(),
            request_timeout: config.timeout,
            retry: config.retry.clone(),
            ..RemoteRuntimeOptions::default()
        };
        let runtime = RemoteRuntime::new(&config.url, token, options)?;
        Ok(Self {
            config,
            runtime,
            phase: Mutex::new(Phase::New),
        })
    }

    /// The client this deployment talks through.
    pub fn runtime_client(&self) -> &RemoteRuntime {
        &self.runtime
    }

    async fn runtime(&self, operation: &str) -> Result<RemoteRuntime> {
        match *self.phase.lock().await {
            Phase::Running => Ok(self.runtime.clone()),
            phase => Err(not_running(BACKEND, phase, operation)),
        }
    }
}

impl RemoteDeployment {
    async fn do_start(&self) -> Result<()> {
        let mut phase = self.phase.lock().await;
        if *phase == Phase::Running {
            return Ok(());
        }
        self.runtime.wait_until_alive(self.config.timeout).await?;
        *phase = Phase::Running;
        Ok(())
    }

    async fn do_stop(&self) -> Result<()> {
        let mut phase = self.phase.lock().await;
        let was_running = *phase == Phase::Running;
        *phase = Phase::Stopped;
        if was_running {
            self.runtime.close().await?;
        }
        Ok(())
    }
}

impl_deployment_over_runtime!(RemoteDeployment, BACKEND);
