//! Deployment configuration: a tagged enum picks the backend (`type: host | docker | remote |
//! faas`).
//!
//! Every backend's configuration parses whatever cargo features are enabled, so one config file
//! works for every build; [`DeploymentConfig::validate`] then fails with
//! [`Error::FeatureDisabled`] naming the feature when the backend is not compiled in.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::{duration_secs, opt_duration_secs, Deployment, Error, Result, RetryConfig};

/// Which sandbox backend to use, and its settings.
///
/// ```
/// use uniagent_core::config::{parse, ConfigFormat};
/// use uniagent_envs::DeploymentConfig;
///
/// let cfg: DeploymentConfig = parse("type = \"host\"\nstartup_timeout = 5.0\n", ConfigFormat::Toml).unwrap();
/// assert_eq!(cfg.backend(), "host");
/// // Typos are rejected with the key's name.
/// let err = parse::<DeploymentConfig>("type: docker\nimgae: debian\n", ConfigFormat::Yaml).unwrap_err();
/// assert!(err.to_string().contains("imgae"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum DeploymentConfig {
    /// The sandbox server as a child process on this machine.
    Host(HostConfig),
    /// A local container started through the Docker Engine API (feature `docker`).
    Docker(DockerConfig),
    /// An already running sandbox server at a URL.
    Remote(RemoteConfig),
    /// Sandboxes created and deleted by an HTTP control plane (feature `faas`).
    Faas(FaasConfig),
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        Self::Host(HostConfig::default())
    }
}

impl DeploymentConfig {
    /// The backend name as written in `type`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Host(_) => "host",
            Self::Docker(_) => "docker",
            Self::Remote(_) => "remote",
            Self::Faas(_) => "faas",
        }
    }

    /// Checks that the backend is compiled in and that values are in range.
    pub fn validate(&self) -> Result<()> {
        let feature_off = |feature: &str| Error::FeatureDisabled {
            backend: self.backend().into(),
            feature: feature.into(),
            krate: "uniagent-envs".into(),
        };
        match self {
            Self::Host(c) => {
                if !cfg!(feature = "host") {
                    return Err(feature_off("host"));
                }
                check_positive("host.startup_timeout", c.startup_timeout)
            }
            Self::Docker(c) => {
                if !cfg!(feature = "docker") {
                    return Err(feature_off("docker"));
                }
                if c.image.trim().is_empty() {
                    return Err(Error::config("docker.image must name a local image"));
                }
                if c.cpus.is_some_and(|cpus| !(cpus > 0.0 && cpus.is_finite())) {
                    return Err(Error::config("docker.cpus must be a positive number"));
                }
                if c.max_concurrent_starts == 0 {
                    return Err(Error::config(
                        "docker.max_concurrent_starts must be at least 1",
                    ));
                }
                // Docker reads 0 (and pids <= 0) as "unlimited": refuse instead of silently
                // running without the limit the capabilities then claim.
                if let Some(bytes) = c.memory_bytes.filter(|b| *b < MIN_DOCKER_MEMORY) {
                    return Err(Error::config(format!(
                        "docker.memory_bytes must be at least {MIN_DOCKER_MEMORY} (6 MiB, Docker's minimum), got {bytes}; leave it out for no limit"
                    )));
                }
                if let Some(pids) = c.pids_limit.filter(|p| *p <= 0) {
                    return Err(Error::config(format!(
                        "docker.pids_limit must be at least 1, got {pids}; leave it out for no limit"
                    )));
                }
                if let Some(lifetime) = c.lifetime {
                    check_positive("docker.lifetime", lifetime)?;
                }
                if c.user.as_deref().is_some_and(|u| u.trim().is_empty()) {
                    return Err(Error::config(
                        "docker.user must name a user (or be left out for the image's)",
                    ));
                }
                if let Some(user) = c.user.as_deref().filter(|_| c.read_only_root) {
                    // The tmpfs work dir is created for the user's uid: Docker ignores a tmpfs
                    // `mode`, so a name it alone resolves would get a directory it cannot write.
                    if numeric_user(user).is_none() {
                        return Err(Error::config(format!(
                            "docker.user must be `uid` or `uid:gid` with read_only_root (the \
                             writable work dir is created for that uid), got `{user}`"
                        )));
                    }
                }
                check_positive("docker.startup_timeout", c.startup_timeout)
            }
            Self::Remote(c) => {
                if !cfg!(feature = "remote") {
                    return Err(feature_off("remote"));
                }
                check_url("remote.url", &c.url)?;
                c.retry.validate()?;
                check_positive("remote.timeout", c.timeout)
            }
            Self::Faas(c) => {
                if !cfg!(feature = "faas") {
                    return Err(feature_off("faas"));
                }
                let endpoints = c.all_endpoints();
                if endpoints.is_empty() {
                    return Err(Error::config(
                        "faas.control_url (or faas.endpoints) must name at least one pool",
                    ));
                }
                for url in &endpoints {
                    check_url("faas.endpoints", url)?;
                }
                if c.image.trim().is_empty() {
                    return Err(Error::config(
                        "faas.image must name an image the pools serve",
                    ));
                }
                c.retry.validate()?;
                check_positive("faas.lease_ttl", c.lease_ttl)?;
                check_positive("faas.timeout", c.timeout)
            }
        }
    }

    /// Validates the configuration and builds its (not yet started) deployment.
    ///
    /// A backend whose cargo feature is off fails with [`Error::FeatureDisabled`].
    ///
    /// ```
    /// use uniagent_core::config::{parse, ConfigFormat};
    /// use uniagent_core::Deployment;
    /// use uniagent_envs::DeploymentConfig;
    ///
    /// let cfg: DeploymentConfig = parse("type: remote\nurl: http://127.0.0.1:8000\n", ConfigFormat::Yaml).unwrap();
    /// let sandbox = cfg.build().unwrap();
    /// assert_eq!(sandbox.backend(), "remote");
    /// ```
    pub fn build(&self) -> Result<Box<dyn Deployment>> {
        self.validate()?;
        match self {
            #[cfg(feature = "host")]
            Self::Host(c) => Ok(Box::new(crate::host::HostDeployment::new(c.clone()))),
            #[cfg(feature = "remote")]
            Self::Remote(c) => Ok(Box::new(crate::remote::RemoteDeployment::new(c.clone())?)),
            #[cfg(feature = "docker")]
            Self::Docker(c) => Ok(Box::new(crate::docker::DockerDeployment::new(c.clone()))),
            #[cfg(feature = "faas")]
            Self::Faas(c) => Ok(Box::new(crate::faas::FaasDeployment::new(c.clone())?)),
            #[allow(unreachable_patterns)]
            _ => Err(Error::internal(format!(
                "backend `{}` passed validation without its feature",
                self.backend()
            ))),
        }
    }
}

/// Docker refuses memory limits below 6 MiB.
const MIN_DOCKER_MEMORY: u64 = 6 << 20;

fn check_positive(key: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::config(format!("{key} must be greater than 0")));
    }
    Ok(())
}

fn check_url(key: &str, url: &str) -> Result<()> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(Error::config(format!(
            "{key} must be an http:// or https:// URL, got `{url}`"
        )));
    }
    Ok(())
}

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

/// Settings of the `remote` backend.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// Base URL of the server, e.g. `http://127.0.0.1:8000`.
    pub url: String,
    /// Token sent as `X-API-Key`.
    pub auth_token: Option<String>,
    /// Environment variable holding the token (preferred over writing it in the file).
    pub auth_token_env: Option<String>,
    /// Transport timeout for requests without a command timeout, seconds.
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    /// Retries of transient connection failures.
    pub retry: RetryConfig,
}

/// The token is redacted: configurations end up in logs.
impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("url", &self.url)
            .field(
                "auth_token",
                &crate::secret::redacted(self.auth_token.as_deref()),
            )
            .field("auth_token_env", &self.auth_token_env)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            auth_token: None,
            auth_token_env: None,
            timeout: Duration::from_secs(60),
            retry: RetryConfig::default(),
        }
    }
}

/// Settings of the `faas` backend: leases from sandbox pools (`uniagent-pool`, see
/// `docs/pool-openapi.yaml`).
///
/// ```
/// use uniagent_core::config::{parse, ConfigFormat};
/// use uniagent_envs::DeploymentConfig;
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

/// `uid` or `uid:gid` as numbers; `None` for a user name.
pub(crate) fn numeric_user(user: &str) -> Option<(u32, Option<u32>)> {
    match user.trim().split_once(':') {
        None => Some((user.trim().parse().ok()?, None)),
        Some((uid, gid)) => Some((uid.parse().ok()?, Some(gid.parse().ok()?))),
    }
}

#[cfg(test)]
mod tests {
    use uniagent_core::config::{parse, to_string, ConfigFormat};

    use super::*;

    fn samples() -> Vec<DeploymentConfig> {
        vec![
            DeploymentConfig::Host(HostConfig {
                keep_work_dir: true,
                ..HostConfig::default()
            }),
            DeploymentConfig::Docker(DockerConfig {
                image: "uniagent-sandbox:debian".into(),
                cpus: Some(0.5),
                // TOML has no null: an absent `lifetime` reads as the default.
                lifetime: Some(Duration::from_secs(600)),
                ..DockerConfig::default()
            }),
            DeploymentConfig::Remote(RemoteConfig {
                url: "http://127.0.0.1:8000".into(),
                auth_token: Some("t".into()),
                ..RemoteConfig::default()
            }),
            DeploymentConfig::Faas(FaasConfig {
                control_url: "https://faas.example/api".into(),
                image: "img".into(),
                ..FaasConfig::default()
            }),
        ]
    }

    #[test]
    fn docker_limits_that_docker_reads_as_unlimited_are_refused() {
        let base = DockerConfig {
            image: "img".into(),
            ..DockerConfig::default()
        };
        for bad in [
            DockerConfig {
                memory_bytes: Some(0),
                ..base.clone()
            },
            DockerConfig {
                pids_limit: Some(0),
                ..base.clone()
            },
            DockerConfig {
                pids_limit: Some(-1),
                ..base.clone()
            },
            DockerConfig {
                lifetime: Some(Duration::ZERO),
                ..base.clone()
            },
            DockerConfig {
                user: Some(" ".into()),
                ..base.clone()
            },
            DockerConfig {
                user: Some("agent".into()),
                read_only_root: true,
                ..base.clone()
            },
            DockerConfig {
                user: Some("1000:staff".into()),
                read_only_root: true,
                ..base.clone()
            },
        ] {
            assert!(
                DeploymentConfig::Docker(bad.clone()).validate().is_err(),
                "{bad:?}"
            );
        }
        for user in ["1000", "1000:1000", "agent"] {
            let fine = DockerConfig {
                user: Some(user.into()),
                read_only_root: user != "agent",
                ..base.clone()
            };
            assert!(DeploymentConfig::Docker(fine).validate().is_ok(), "{user}");
        }
        // Leaving a limit out is the explicit way to have none.
        let unlimited = DockerConfig {
            memory_bytes: None,
            pids_limit: None,
            ..base
        };
        assert!(
            !cfg!(feature = "docker") || DeploymentConfig::Docker(unlimited).validate().is_ok()
        );
        let nan_jitter: Result<DeploymentConfig> = parse(
            "type: remote\nurl: http://x\nretry:\n  jitter: .nan\n",
            ConfigFormat::Yaml,
        );
        assert!(nan_jitter.is_err());
    }

    #[test]
    fn every_backend_round_trips_through_yaml_toml_and_json() {
        for cfg in samples() {
            for format in [ConfigFormat::Yaml, ConfigFormat::Toml, ConfigFormat::Json] {
                let text = to_string(&cfg, format).unwrap();
                let back: DeploymentConfig = parse(&text, format).unwrap();
                assert_eq!(back, cfg, "{format:?}:\n{text}");
            }
        }
    }

    #[test]
    fn misspelled_keys_and_unknown_backends_are_named() {
        let err = parse::<DeploymentConfig>("type: remote\nulr: http://x\n", ConfigFormat::Yaml)
            .unwrap_err();
        assert!(err.to_string().contains("ulr"), "{err}");
        let err =
            parse::<DeploymentConfig>("type = \"kubernetes\"\n", ConfigFormat::Toml).unwrap_err();
        assert!(err.to_string().contains("kubernetes"), "{err}");
        let err = parse::<DeploymentConfig>(
            "type: docker\nretry:\n  max_attempts: 2\n",
            ConfigFormat::Yaml,
        )
        .unwrap_err();
        assert!(err.to_string().contains("retry"), "{err}");
        let err = parse::<DeploymentConfig>(
            "type: remote\nurl: http://x\nretry:\n  max_attemps: 2\n",
            ConfigFormat::Yaml,
        )
        .unwrap_err();
        assert!(err.to_string().contains("max_attemps"), "{err}");
    }

    #[test]
    fn a_backend_without_its_feature_parses_but_fails_validation_naming_the_feature() {
        let cfg: DeploymentConfig = parse(
            "type: faas\ncontrol_url: https://x\nimage: i\n",
            ConfigFormat::Yaml,
        )
        .unwrap();
        let result = cfg.validate();
        if cfg!(feature = "faas") {
            assert!(result.is_ok());
        } else {
            let err = result.unwrap_err();
            assert!(matches!(&err, Error::FeatureDisabled { feature, .. } if feature == "faas"));
            assert!(err.to_string().contains("`faas`"));
        }
        let cfg: DeploymentConfig = parse("type: docker\nimage: x\n", ConfigFormat::Yaml).unwrap();
        assert_eq!(cfg.validate().is_ok(), cfg!(feature = "docker"));
    }

    #[test]
    fn build_picks_the_backend_or_names_what_is_missing() {
        let host: DeploymentConfig = parse("type: host\n", ConfigFormat::Yaml).unwrap();
        assert_eq!(
            host.build().map(|d| d.backend().to_owned()).ok().as_deref(),
            cfg!(feature = "host").then_some("host")
        );
        let remote: DeploymentConfig = parse(
            "type: remote\nurl: http://127.0.0.1:1\n",
            ConfigFormat::Yaml,
        )
        .unwrap();
        assert_eq!(
            remote
                .build()
                .map(|d| d.backend().to_owned())
                .ok()
                .as_deref(),
            cfg!(feature = "remote").then_some("remote")
        );
        let docker: DeploymentConfig =
            parse("type: docker\nimage: debian\n", ConfigFormat::Yaml).unwrap();
        match docker.build() {
            Ok(d) => assert!(cfg!(feature = "docker") && d.backend() == "docker"),
            Err(err) => assert!(
                !cfg!(feature = "docker") && matches!(err, Error::FeatureDisabled { .. }),
                "{err}"
            ),
        }
        let missing: DeploymentConfig = parse(
            "type: remote\nurl: http://x\nauth_token_env: UNIAGENT_TEST_SURELY_UNSET_VAR\n",
            ConfigFormat::Yaml,
        )
        .unwrap();
        if cfg!(feature = "remote") {
            assert!(missing
                .build()
                .unwrap_err()
                .to_string()
                .contains("UNIAGENT_TEST_SURELY_UNSET_VAR"));
        }
    }

    #[test]
    fn validation_rejects_bad_values() {
        let cfg: DeploymentConfig =
            parse("type: remote\nurl: ftp://x\n", ConfigFormat::Yaml).unwrap();
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("remote.url"));
        let cfg: DeploymentConfig =
            parse("type: host\nstartup_timeout: 0\n", ConfigFormat::Yaml).unwrap();
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("startup_timeout"));
    }
}
