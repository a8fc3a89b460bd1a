//! The `host` backend's settings, their checks and its builder.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::{duration_secs, Result};

use crate::config::{check_positive, BackendConfig};

/// Settings of the `host` backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// Path of the `uniagent-sandbox` binary; by default it is looked up next to the current
    /// executable and then on `PATH`.
    pub server_binary: Option<PathBuf>,
    /// Where fresh work directories are created (default: the system temp dir).
    pub work_root: Option<PathBuf>,
    /// Keep the work directory after stop (for debugging).
    pub keep_work_dir: bool,
    /// How long to wait for the server to answer `is_alive`, seconds.
    #[serde(with = "duration_secs")]
    pub startup_timeout: Duration,
    /// Extra environment variables for the server and its shells.
    pub env: BTreeMap<String, String>,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            server_binary: None,
            work_root: None,
            keep_work_dir: false,
            startup_timeout: Duration::from_secs(10),
            env: BTreeMap::new(),
        }
    }
}

impl BackendConfig for HostConfig {
    fn validate(&self) -> Result<()> {
        check_positive("host.startup_timeout", self.startup_timeout)
    }
}

#[cfg(feature = "host")]
#[async_trait::async_trait]
impl crate::config::BackendBuilder for HostConfig {
    fn build(&self) -> Result<Box<dyn uniagent_core::Deployment>> {
        Ok(Box::new(super::HostDeployment::new(self.clone())))
    }

    /// The server binary must be found (the error says how to build it).
    async fn preflight(&self) -> Result<()> {
        super::find_server_binary(self.server_binary.as_deref())?;
        Ok(())
    }
}
