//! Deployment configuration: the registry of sandbox backends.
//!
//! Each backend owns its settings, their validation and its builder, in its own folder
//! (`host/config.rs`, `docker/config.rs`, ...): the settings implement [`BackendConfig`] in
//! every build, and the backend implements [`BackendBuilder`] when its cargo feature is on.
//! [`DeploymentConfig`] is generated from one registration line per backend, so a backend
//! without either impl does not compile, and there is no match arm to forget.
//!
//! Every backend's configuration parses whatever cargo features are enabled, so one config file
//! works for every build; [`DeploymentConfig::validate`] then fails with
//! [`Error::FeatureDisabled`] naming the feature when the backend is not compiled in.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uniagent_core::{Deployment, Error, Result};

pub use crate::docker::{DockerConfig, NetworkMode};
pub use crate::faas::FaasConfig;
pub use crate::host::HostConfig;
pub use crate::remote::RemoteConfig;

/// The settings of one sandbox backend, compiled in every build so that every config parses.
///
/// ```
/// use uniagent_sandboxes::config::BackendConfig;
/// use uniagent_sandboxes::DockerConfig;
///
/// let mut docker = DockerConfig { image: "swe-{instance_id}:latest".into(), ..DockerConfig::default() };
/// assert!(docker.validate().is_ok());
/// // The image (and the working directory) are per-task templates, filled in for each task
/// // by the caller.
/// let fields = docker.per_task_fields();
/// assert_eq!(fields.len(), 2);
/// assert_eq!((fields[0].0, fields[1].0), ("image", "work_dir"));
/// ```
pub trait BackendConfig: std::fmt::Debug + Send + Sync {
    /// Checks that the values are in range (whether or not the backend is compiled in). Errors
    /// name the key as `backend.key`.
    fn validate(&self) -> Result<()>;

    /// The fields that may hold per-task templates (`{instance_id}`), by key, for the caller to
    /// fill in before [`DeploymentConfig::build`]. Default: none.
    fn per_task_fields(&mut self) -> Vec<(&'static str, &mut String)> {
        Vec::new()
    }

    /// Applies one task's resource limits over the configured ones. Default: refused, since
    /// the backend has no limits of its own to set ([`DeploymentConfig::apply_limits`] calls
    /// this only when a limit is set).
    fn apply_limits(&mut self, _limits: &SandboxLimits) -> Result<()> {
        Err(Error::config("this backend takes no per-task limits"))
    }
}

/// The resources one task asks of its sandbox (a Harbor task's `[environment] cpus`,
/// `memory_mb` and `network_mode`). Each one set replaces the configured value for that task's
/// sandbox; one left out keeps it.
///
/// ```
/// use uniagent_sandboxes::{DeploymentConfig, DockerConfig, NetworkMode, SandboxLimits};
/// let mut cfg = DeploymentConfig::from(DockerConfig {
///     image: "img".into(),
///     network: NetworkMode::Bridge,
///     ..DockerConfig::default()
/// });
/// let limits = SandboxLimits { cpus: Some(0.5), no_network: true, ..SandboxLimits::default() };
/// cfg.apply_limits(&limits).unwrap();
/// let DeploymentConfig::Docker(docker) = cfg else { unreachable!() };
/// assert_eq!((docker.cpus, docker.network), (Some(0.5), NetworkMode::None));
/// assert_eq!(docker.memory_bytes, DockerConfig::default().memory_bytes);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxLimits {
    /// CPU cores.
    pub cpus: Option<f64>,
    /// Memory in bytes.
    pub memory_bytes: Option<u64>,
    /// No network at all (only loopback).
    pub no_network: bool,
}

impl SandboxLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A backend compiled into this build: builds deployments from its settings.
#[async_trait]
pub trait BackendBuilder: BackendConfig {
    /// A new, not yet started deployment. Called after [`BackendConfig::validate`] passed.
    fn build(&self) -> Result<Box<dyn Deployment>>;

    /// Checks, before a run starts anything, what every sandbox of these settings will need and
    /// the settings alone cannot tell (an image present locally, a binary found). Default:
    /// nothing to check.
    async fn preflight(&self) -> Result<()> {
        Ok(())
    }
}

/// Generates [`DeploymentConfig`] from the registered backends: the serde-tagged enum and its
/// dispatch to [`BackendConfig`] and (when the backend's feature, named as its `type`, is on)
/// [`BackendBuilder`].
macro_rules! register_backends {
    ($( $(#[$doc:meta])* $variant:ident($config:ty) = $name:tt, )+) => {
        /// Which sandbox backend to use, and its settings.
        ///
        /// ```
        /// use uniagent_core::config::{parse, ConfigFormat};
        /// use uniagent_sandboxes::DeploymentConfig;
        ///
        /// let cfg: DeploymentConfig = parse("type = \"host\"\nstartup_timeout = 5.0\n", ConfigFormat::Toml).unwrap();
        /// assert_eq!(cfg.backend(), "host");
        /// // Typos are rejected with the key's name.
        /// let err = parse::<DeploymentConfig>("type: docker\nimgae: debian\n", ConfigFormat::Yaml).unwrap_err();
        /// assert!(err.to_string().contains("imgae"));
        /// ```
        // Settings are built once per sandbox and passed by reference: the size of the largest
        // backend's (k8s) costs nothing worth a box, which the serde-tagged variants would see.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "type")]
        pub enum DeploymentConfig {
            $( $(#[$doc])* #[serde(rename = $name)] $variant($config), )+
        }

        /// The `type` of every registered backend, compiled in or not.
        pub const BACKENDS: &[&str] = &[$($name),+];

        impl DeploymentConfig {
            /// The backend name as written in `type`.
            pub fn backend(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => $name, )+
                }
            }

            /// Whether this build has the backend (its cargo feature of `uniagent-sandboxes`).
            pub fn compiled_in(&self) -> bool {
                match self {
                    $( Self::$variant(_) => cfg!(feature = $name), )+
                }
            }

            /// The backend's settings.
            pub fn settings(&self) -> &dyn BackendConfig {
                match self {
                    $( Self::$variant(c) => c, )+
                }
            }

            /// The backend's settings, to fill in per-task fields.
            pub fn settings_mut(&mut self) -> &mut dyn BackendConfig {
                match self {
                    $( Self::$variant(c) => c, )+
                }
            }

            /// The backend's builder; `None` when the backend is not compiled in.
            fn builder(&self) -> Option<&dyn BackendBuilder> {
                match self {
                    $( #[cfg(feature = $name)] Self::$variant(c) => Some(c), )+
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        }

        $(
            impl From<$config> for DeploymentConfig {
                fn from(config: $config) -> Self {
                    Self::$variant(config)
                }
            }
        )+
    };
}

// The registered backends: one line each (docs, variant, settings, `type` = cargo feature).
register_backends! {
    /// The sandbox server as a child process on this machine.
    Host(HostConfig) = "host",
    /// A local container started through the Docker Engine API (feature `docker`).
    Docker(DockerConfig) = "docker",
    /// An already running sandbox server at a URL.
    Remote(RemoteConfig) = "remote",
    /// Sandboxes created and deleted by an HTTP control plane (feature `faas`).
    Faas(FaasConfig) = "faas",
    /// Sandboxes claimed from agent-sandbox warm pools on Kubernetes (feature `k8s`).
    K8s(crate::k8s::K8sConfig) = "k8s",
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        Self::Host(HostConfig::default())
    }
}

impl DeploymentConfig {
    /// Checks that the backend is compiled in and that values are in range.
    pub fn validate(&self) -> Result<()> {
        if !self.compiled_in() {
            return Err(Error::FeatureDisabled {
                backend: self.backend().into(),
                feature: self.backend().into(),
                krate: "uniagent-sandboxes".into(),
            });
        }
        self.settings().validate()
    }

    /// The fields that may hold per-task templates, by key (see
    /// [`BackendConfig::per_task_fields`]).
    pub fn per_task_fields(&mut self) -> Vec<(&'static str, &mut String)> {
        self.settings_mut().per_task_fields()
    }

    /// Applies one task's [`SandboxLimits`] (nothing to do when none is set). A backend that
    /// cannot apply them is an error naming it: running the task without the limits it asks
    /// for would be silently different.
    pub fn apply_limits(&mut self, limits: &SandboxLimits) -> Result<()> {
        if limits.is_empty() {
            return Ok(());
        }
        let backend = self.backend();
        self.settings_mut().apply_limits(limits).map_err(|e| {
            Error::config(format!(
                "the `{backend}` backend cannot apply a task's limits ({limits:?}): {e}"
            ))
        })?;
        self.settings().validate()
    }

    /// Validates the configuration and builds its (not yet started) deployment.
    ///
    /// A backend whose cargo feature is off fails with [`Error::FeatureDisabled`].
    ///
    /// ```
    /// use uniagent_core::config::{parse, ConfigFormat};
    /// use uniagent_core::Deployment;
    /// use uniagent_sandboxes::DeploymentConfig;
    ///
    /// let cfg: DeploymentConfig = parse("type: remote\nurl: http://127.0.0.1:8000\n", ConfigFormat::Yaml).unwrap();
    /// let sandbox = cfg.build().unwrap();
    /// assert_eq!(sandbox.backend(), "remote");
    /// ```
    pub fn build(&self) -> Result<Box<dyn Deployment>> {
        self.validate()?;
        self.compiled_builder()?.build()
    }

    /// Validates the configuration, then checks what its sandboxes need before anything starts
    /// (the backend's [`BackendBuilder::preflight`]: `docker` checks that the image is local,
    /// `host` that the server binary is found).
    pub async fn preflight(&self) -> Result<()> {
        self.validate()?;
        self.compiled_builder()?.preflight().await
    }

    fn compiled_builder(&self) -> Result<&dyn BackendBuilder> {
        self.builder().ok_or_else(|| {
            Error::internal(format!(
                "backend `{}` passed validation without its feature",
                self.backend()
            ))
        })
    }
}

/// Fails naming `key` when `d` is zero.
pub(crate) fn check_positive(key: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::config(format!("{key} must be greater than 0")));
    }
    Ok(())
}

/// Fails naming `key` unless `url` is an http(s) URL.
pub(crate) fn check_url(key: &str, url: &str) -> Result<()> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(Error::config(format!(
            "{key} must be an http:// or https:// URL, got `{url}`"
        )));
    }
    Ok(())
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
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        for user in ["1000", "1000:1000", "agent"] {
            let fine = DockerConfig {
                user: Some(user.into()),
                read_only_root: user != "agent",
                ..base.clone()
            };
            assert!(fine.validate().is_ok(), "{user}");
        }
        // Leaving a limit out is the explicit way to have none.
        let unlimited = DockerConfig {
            memory_bytes: None,
            pids_limit: None,
            ..base
        };
        assert!(unlimited.validate().is_ok());
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
    fn every_registered_backend_parses_by_its_type_and_names_itself() {
        for name in BACKENDS {
            let cfg: DeploymentConfig =
                parse(&format!("type: {name}\n"), ConfigFormat::Yaml).unwrap();
            assert_eq!(cfg.backend(), *name);
            if !cfg.compiled_in() {
                assert!(
                    matches!(cfg.validate(), Err(Error::FeatureDisabled { feature, .. }) if feature == *name)
                );
            }
        }
        let docker: DeploymentConfig = DockerConfig {
            image: "img".into(),
            ..DockerConfig::default()
        }
        .into();
        assert_eq!(docker.backend(), "docker");
    }

    #[test]
    fn per_task_fields_are_the_images_and_dockers_work_dir() {
        let mut keys = Vec::new();
        for mut cfg in samples() {
            let backend = cfg.backend();
            for (key, value) in cfg.per_task_fields() {
                value.push_str("-{id}");
                keys.push(format!("{backend}.{key}"));
            }
            if let DeploymentConfig::Docker(d) = &cfg {
                assert!(d.image.ends_with("-{id}"), "{d:?}");
            }
        }
        assert_eq!(keys, ["docker.image", "docker.work_dir", "faas.image"]);
    }

    #[test]
    fn task_limits_apply_to_docker_and_are_refused_elsewhere() {
        let limits = SandboxLimits {
            cpus: Some(0.5),
            memory_bytes: Some(300 << 20),
            no_network: true,
        };
        let mut docker = DeploymentConfig::Docker(DockerConfig {
            image: "img".into(),
            network: NetworkMode::Bridge,
            ..DockerConfig::default()
        });
        docker.apply_limits(&limits).unwrap();
        let DeploymentConfig::Docker(d) = &docker else {
            unreachable!()
        };
        assert_eq!(
            (d.cpus, d.memory_bytes, d.network),
            (Some(0.5), Some(300 << 20), NetworkMode::None)
        );
        // A limit out of range is refused as the config's own would be.
        let tiny = SandboxLimits {
            memory_bytes: Some(1 << 20),
            ..SandboxLimits::default()
        };
        assert!(docker.apply_limits(&tiny).is_err());
        for mut cfg in samples() {
            if cfg.backend() == "docker" {
                continue;
            }
            let before = cfg.clone();
            cfg.apply_limits(&SandboxLimits::default()).unwrap();
            assert_eq!(cfg, before);
            let err = cfg.apply_limits(&limits).unwrap_err().to_string();
            assert!(err.contains(&format!("`{}`", cfg.backend())), "{err}");
        }
    }

    #[cfg(feature = "host")]
    #[tokio::test]
    async fn host_preflight_names_the_missing_server_binary() {
        let cfg = DeploymentConfig::Host(HostConfig {
            server_binary: Some("/nonexistent/uniagent-sandbox".into()),
            ..HostConfig::default()
        });
        let err = cfg.preflight().await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/nonexistent/uniagent-sandbox"), "{text}");
        assert!(matches!(err, Error::Config { .. }), "{err:?}");
    }

    #[test]
    fn validation_rejects_bad_values() {
        let cfg: DeploymentConfig =
            parse("type: remote\nurl: ftp://x\n", ConfigFormat::Yaml).unwrap();
        // The values are checked whether or not the backend is compiled in.
        assert!(cfg
            .settings()
            .validate()
            .unwrap_err()
            .to_string()
            .contains("remote.url"));
        let cfg: DeploymentConfig =
            parse("type: host\nstartup_timeout: 0\n", ConfigFormat::Yaml).unwrap();
        assert!(cfg
            .settings()
            .validate()
            .unwrap_err()
            .to_string()
            .contains("startup_timeout"));
    }
}
