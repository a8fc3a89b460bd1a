//! The `docker` backend's settings, their checks and its builder.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::{duration_secs, opt_duration_secs, Error, Result};

use crate::config::{check_positive, BackendConfig, SandboxLimits};

/// Docker refuses memory limits below 6 MiB.
const MIN_DOCKER_MEMORY: u64 = 6 << 20;

/// Network access of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// No network at all: Docker's `none` network, the container has only loopback. The host
    /// reaches the server through a relay of `docker exec`s over the Docker API, at a loopback
    /// port of the host; nothing in the container can reach the host, other containers or the
    /// internet.
    #[default]
    None,
    /// Docker's default bridge network; the server's port is published on 127.0.0.1 with an
    /// ephemeral host port.
    Bridge,
    /// The host's network namespace; the server listens on 127.0.0.1 at a free port.
    Host,
}

/// Settings of the `docker` backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    /// Local image to start.
    pub image: String,
    /// Pull the image when missing (off: this project builds images locally).
    pub pull: bool,
    /// Network access.
    pub network: NetworkMode,
    /// Memory limit in bytes.
    pub memory_bytes: Option<u64>,
    /// CPU quota in cores.
    pub cpus: Option<f64>,
    /// Maximum number of processes.
    pub pids_limit: Option<i64>,
    /// Mount the root file system read-only (the work dir stays writable).
    pub read_only_root: bool,
    /// Working directory inside the container.
    pub work_dir: String,
    /// The sandbox is stopped after this long, whatever it is doing.
    #[serde(with = "opt_duration_secs")]
    pub lifetime: Option<Duration>,
    /// How long to wait for the server to answer `is_alive`, seconds.
    #[serde(with = "duration_secs")]
    pub startup_timeout: Duration,
    /// Maximum concurrent container starts.
    pub max_concurrent_starts: usize,
    /// Capabilities added back after all are dropped (default none: the sandbox server and its
    /// shells run as the image's user and need none).
    pub cap_add: Vec<String>,
    /// Path of the `uniagent-sandbox` binary copied into the container (it must run in the
    /// image: a static build runs in any image). Default: `$UNIAGENT_SANDBOX_BINARY`, else next
    /// to the current executable, else on `PATH`.
    pub server_binary: Option<PathBuf>,
    /// Path of the `uniagent-toolbox` binary copied next to the server; by default the one next
    /// to the server binary when present.
    pub toolbox_binary: Option<PathBuf>,
    /// Run id every container is labelled with (`cleanup --run-id` removes a run's
    /// containers). Default: `$UNIAGENT_RUN_ID`, else a random id per process.
    pub run_id: Option<String>,
    /// Extra environment variables for the server and its shells.
    pub env: BTreeMap<String, String>,
    /// The user (`name`, `uid` or `uid:gid`) the server and its shells run as; default: the
    /// image's user (root in the project's image, confined by the dropped capabilities,
    /// `no-new-privileges` and the limits). A non-root user needs a writable `work_dir`:
    /// with `read_only_root` it is a tmpfs owned by the user, which must then be given as
    /// `uid` or `uid:gid`; otherwise the image must provide one.
    pub user: Option<String>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            image: String::new(),
            pull: false,
            network: NetworkMode::None,
            memory_bytes: Some(2 << 30),
            cpus: Some(1.0),
            pids_limit: Some(512),
            read_only_root: false,
            work_dir: "/work".into(),
            lifetime: Some(Duration::from_secs(3600)),
            startup_timeout: Duration::from_secs(30),
            max_concurrent_starts: 8,
            cap_add: Vec::new(),
            server_binary: None,
            toolbox_binary: None,
            run_id: None,
            env: BTreeMap::new(),
            user: None,
        }
    }
}

impl BackendConfig for DockerConfig {
    fn validate(&self) -> Result<()> {
        if self.image.trim().is_empty() {
            return Err(Error::config("docker.image must name a local image"));
        }
        if self
            .cpus
            .is_some_and(|cpus| !(cpus > 0.0 && cpus.is_finite()))
        {
            return Err(Error::config("docker.cpus must be a positive number"));
        }
        if self.max_concurrent_starts == 0 {
            return Err(Error::config(
                "docker.max_concurrent_starts must be at least 1",
            ));
        }
        // Docker reads 0 (and pids <= 0) as "unlimited": refuse instead of silently running
        // without the limit the capabilities then claim.
        if let Some(bytes) = self.memory_bytes.filter(|b| *b < MIN_DOCKER_MEMORY) {
            return Err(Error::config(format!(
                "docker.memory_bytes must be at least {MIN_DOCKER_MEMORY} (6 MiB, Docker's minimum), got {bytes}; leave it out for no limit"
            )));
        }
        if let Some(pids) = self.pids_limit.filter(|p| *p <= 0) {
            return Err(Error::config(format!(
                "docker.pids_limit must be at least 1, got {pids}; leave it out for no limit"
            )));
        }
        if let Some(lifetime) = self.lifetime {
            check_positive("docker.lifetime", lifetime)?;
        }
        if self.user.as_deref().is_some_and(|u| u.trim().is_empty()) {
            return Err(Error::config(
                "docker.user must name a user (or be left out for the image's)",
            ));
        }
        if let Some(user) = self.user.as_deref().filter(|_| self.read_only_root) {
            // The tmpfs work dir is created for the user's uid: Docker ignores a tmpfs `mode`,
            // so a name it alone resolves would get a directory it cannot write.
            if numeric_user(user).is_none() {
                return Err(Error::config(format!(
                    "docker.user must be `uid` or `uid:gid` with read_only_root (the \
                     writable work dir is created for that uid), got `{user}`"
                )));
            }
        }
        check_positive("docker.startup_timeout", self.startup_timeout)
    }

    /// The image is a per-task template (`swe-{instance_id}`).
    fn per_task_fields(&mut self) -> Vec<(&'static str, &mut String)> {
        vec![("image", &mut self.image), ("work_dir", &mut self.work_dir)]
    }

    /// `cpus` and `memory_bytes` replace the configured ones; `no_network` is
    /// [`NetworkMode::None`].
    fn apply_limits(&mut self, limits: &SandboxLimits) -> Result<()> {
        if let Some(cpus) = limits.cpus {
            self.cpus = Some(cpus);
        }
        if let Some(bytes) = limits.memory_bytes {
            self.memory_bytes = Some(bytes);
        }
        if limits.no_network {
            self.network = NetworkMode::None;
        }
        Ok(())
    }
}

#[cfg(feature = "docker")]
#[async_trait::async_trait]
impl crate::config::BackendBuilder for DockerConfig {
    fn build(&self) -> Result<Box<dyn uniagent_core::Deployment>> {
        Ok(Box::new(super::DockerDeployment::new(self.clone())))
    }

    /// The daemon must answer and the image must be local (or `pull` set).
    async fn preflight(&self) -> Result<()> {
        super::image::preflight_image(self).await
    }
}

/// `uid` or `uid:gid` as numbers; `None` for a user name.
pub(crate) fn numeric_user(user: &str) -> Option<(u32, Option<u32>)> {
    match user.trim().split_once(':') {
        None => Some((user.trim().parse().ok()?, None)),
        Some((uid, gid)) => Some((uid.parse().ok()?, Some(gid.parse().ok()?))),
    }
}
