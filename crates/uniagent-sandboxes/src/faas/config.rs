//! The `faas` backend's settings, their checks and its builder.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::{duration_secs, Error, Result, RetryConfig};

use crate::config::{check_positive, check_url, BackendConfig};

/// Settings of the `faas` backend: leases from sandbox pools (`uniagent-pool`, see
/// `docs/pool-openapi.yaml`).
///
/// ```
/// use uniagent_core::config::{parse, ConfigFormat};
/// use uniagent_sandboxes::DeploymentConfig;
///
/// let cfg: DeploymentConfig = parse(
///     "type: faas\ncontrol_url: http://10.0.0.1:8700\nendpoints: [http://10.0.0.2:8700]\nimage: debian:12\nlease_ttl: 30\n",
///     ConfigFormat::Yaml,
/// ).unwrap();
/// assert_eq!(cfg.validate().is_ok(), cfg!(feature = "faas"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaasConfig {
    /// Base URL of a pool (`http://host:port`).
    pub control_url: String,
    /// Further pools; every lease goes to the least loaded of all that answer.
    pub endpoints: Vec<String>,
    /// Environment variable holding the pools' API key (`Authorization: Bearer`).
    pub api_key_env: Option<String>,
    /// Image the pools start (one of those they are configured to serve).
    pub image: String,
    /// Time to live of the lease; it is renewed every third of it while the sandbox runs.
    #[serde(with = "duration_secs")]
    pub lease_ttl: Duration,
    /// Memory limit in bytes (at most the pool's; default the pool's).
    pub memory_bytes: Option<u64>,
    /// CPU quota in cores (at most the pool's; default the pool's).
    pub cpus: Option<f64>,
    /// Maximum number of processes (at most the pool's; default the pool's).
    pub pids_limit: Option<i64>,
    /// Deadline of one control request and of sandbox requests without a command timeout,
    /// seconds.
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    /// Rounds over the pools while all are full or down, and retries of transient sandbox
    /// connection failures.
    pub retry: RetryConfig,
}

impl FaasConfig {
    /// `control_url` and `endpoints`, without duplicates or trailing slashes.
    pub fn all_endpoints(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for url in std::iter::once(&self.control_url).chain(&self.endpoints) {
            let url = url.trim_end_matches('/').to_owned();
            if !url.is_empty() && !all.contains(&url) {
                all.push(url);
            }
        }
        all
    }
}

impl Default for FaasConfig {
    fn default() -> Self {
        Self {
            control_url: String::new(),
            endpoints: Vec::new(),
            api_key_env: None,
            image: String::new(),
            lease_ttl: Duration::from_secs(30),
            memory_bytes: None,
            cpus: None,
            pids_limit: None,
            timeout: Duration::from_secs(60),
            retry: RetryConfig::default(),
        }
    }
}

impl BackendConfig for FaasConfig {
    fn validate(&self) -> Result<()> {
        let endpoints = self.all_endpoints();
        if endpoints.is_empty() {
            return Err(Error::config(
                "faas.control_url (or faas.endpoints) must name at least one pool",
            ));
        }
        for url in &endpoints {
            check_url("faas.endpoints", url)?;
        }
        if self.image.trim().is_empty() {
            return Err(Error::config(
                "faas.image must name an image the pools serve",
            ));
        }
        self.retry.validate()?;
        check_positive("faas.lease_ttl", self.lease_ttl)?;
        check_positive("faas.timeout", self.timeout)
    }

    /// The image is a per-task template (`swe-{instance_id}`), like docker's.
    fn per_task_fields(&mut self) -> Vec<(&'static str, &mut String)> {
        vec![("image", &mut self.image)]
    }
}

#[cfg(feature = "faas")]
#[async_trait::async_trait]
impl crate::config::BackendBuilder for FaasConfig {
    fn build(&self) -> Result<Box<dyn uniagent_core::Deployment>> {
        Ok(Box::new(super::FaasDeployment::new(self.clone())?))
    }
}
