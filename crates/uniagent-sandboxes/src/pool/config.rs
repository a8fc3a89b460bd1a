//! The pool's configuration file.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::{duration_secs, Error, Result};

use crate::config::DockerConfig;

/// Settings of one sandbox pool (one per node).
///
/// ```
/// use uniagent_core::config::{parse, ConfigFormat};
/// use uniagent_sandboxes::pool::PoolConfig;
///
/// let cfg: PoolConfig = parse(
///     "name: node-a\ncapacity: 8\nlease_ttl: 20\nimages:\n  - warm: 2\n    docker:\n      image: debian:12\n",
///     ConfigFormat::Yaml,
/// ).unwrap();
/// cfg.validate().unwrap();
/// assert_eq!(cfg.images[0].docker.image, "debian:12");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// The pool's name: the node in every lease, and the value of the container label that
    /// lets a restarted pool find its sandboxes. Keep it stable across restarts and unique
    /// per Docker host; ASCII letters, digits, `.`, `_` and `-`. Default: the host name.
    pub name: String,
    /// Sandboxes held at most, leased, warm and starting together.
    pub capacity: usize,
    /// Time to live of a lease that asks for none, seconds.
    #[serde(with = "duration_secs")]
    pub lease_ttl: Duration,
    /// The longest time to live a lease may ask for, seconds. Leases recovered after a
    /// restart get this long to be renewed (their last renewal is not in the labels).
    #[serde(with = "duration_secs")]
    pub max_ttl: Duration,
    /// How often expired leases are looked for, seconds.
    #[serde(with = "duration_secs")]
    pub reap_interval: Duration,
    /// Environment variable holding the API key that `POST /v1/leases`, `GET /v1/leases` and
    /// `GET /v1/capacity` require as `Authorization: Bearer KEY`; none: open.
    pub api_key_env: Option<String>,
    /// The images served, each with its template and warm pool size.
    pub images: Vec<ImagePool>,
    /// How long a stopping pool (SIGTERM) waits for its live leases to be released before it
    /// removes them, seconds. It takes no new leases meanwhile (503 `shutting_down`, so
    /// clients go to another node) and removes its warm sandboxes at once. 0: remove at once.
    /// Keep it below the orchestrator's kill deadline (Kubernetes'
    /// `terminationGracePeriodSeconds`).
    #[serde(with = "duration_secs")]
    pub drain_grace: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            name: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "pool".into()),
            capacity: 16,
            lease_ttl: Duration::from_secs(30),
            max_ttl: Duration::from_secs(600),
            reap_interval: Duration::from_secs(1),
            api_key_env: None,
            images: Vec::new(),
            drain_grace: Duration::from_secs(30),
        }
    }
}

/// One image a pool serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagePool {
    /// Sandboxes of this image kept started and unleased.
    #[serde(default)]
    pub warm: usize,
    /// The container template (`image` is also the key clients ask for). Its limits are the
    /// most a lease may ask for.
    pub docker: DockerConfig,
}

impl PoolConfig {
    /// Checks ranges, names and every image template.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Error::Config {
            message,
            source: None,
        };
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !name_ok {
            return Err(bad(format!(
                "pool.name must be a non-empty name of ASCII letters, digits, `.`, `_` and `-`, got `{}`",
                self.name
            )));
        }
        if self.capacity == 0 {
            return Err(bad("pool.capacity must be at least 1".into()));
        }
        for (key, value) in [
            ("lease_ttl", self.lease_ttl),
            ("max_ttl", self.max_ttl),
            ("reap_interval", self.reap_interval),
        ] {
            if value.is_zero() {
                return Err(bad(format!("pool.{key} must be greater than 0")));
            }
        }
        if self.lease_ttl > self.max_ttl {
            return Err(bad("pool.lease_ttl must not exceed pool.max_ttl".into()));
        }
        if self.images.is_empty() {
            return Err(bad("pool.images must name at least one image".into()));
        }
        let warm: usize = self.images.iter().map(|i| i.warm).sum();
        if warm > self.capacity {
            return Err(bad(format!(
                "pool.images ask for {warm} warm sandboxes, more than pool.capacity ({})",
                self.capacity
            )));
        }
        for (i, image) in self.images.iter().enumerate() {
            if self.images[..i]
                .iter()
                .any(|other| other.docker.image == image.docker.image)
            {
                return Err(bad(format!(
                    "pool.images lists `{}` twice",
                    image.docker.image
                )));
            }
            crate::config::BackendConfig::validate(&image.docker)?;
        }
        if let Some(var) = &self.api_key_env {
            if std::env::var(var).map_or(true, |v| v.is_empty()) {
                return Err(bad(format!(
                    "pool.api_key_env names `{var}`, which is not set"
                )));
            }
        }
        Ok(())
    }

    /// The template of `image`, if served.
    pub fn image(&self, image: &str) -> Option<&ImagePool> {
        self.images.iter().find(|i| i.docker.image == image)
    }

    /// The run id of the pool's containers (`uniagent-docker cleanup --run-id` takes it).
    pub fn run_id(&self) -> String {
        format!("pool-{}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use uniagent_core::config::{parse, ConfigFormat};

    use super::*;

    fn base() -> PoolConfig {
        PoolConfig {
            name: "n".into(),
            images: vec![ImagePool {
                warm: 1,
                docker: DockerConfig {
                    image: "img".into(),
                    ..DockerConfig::default()
                },
            }],
            ..PoolConfig::default()
        }
    }

    #[test]
    fn bad_values_are_named() {
        assert!(base().validate().is_ok());
        for (cfg, key) in [
            (
                PoolConfig {
                    capacity: 0,
                    ..base()
                },
                "capacity",
            ),
            (
                PoolConfig {
                    name: "a b".into(),
                    ..base()
                },
                "name",
            ),
            (
                PoolConfig {
                    lease_ttl: Duration::from_secs(700),
                    ..base()
                },
                "lease_ttl",
            ),
            (
                PoolConfig {
                    images: vec![],
                    ..base()
                },
                "images",
            ),
            (
                PoolConfig {
                    capacity: 1,
                    images: vec![ImagePool {
                        warm: 2,
                        ..base().images[0].clone()
                    }],
                    ..base()
                },
                "warm",
            ),
            (
                PoolConfig {
                    images: vec![base().images[0].clone(), base().images[0].clone()],
                    ..base()
                },
                "twice",
            ),
        ] {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn the_kubernetes_config_map_holds_a_valid_pool_configuration() {
        let map: serde_json::Value = parse(
            include_str!("../../../../deploy/k8s/pool-config.yaml"),
            ConfigFormat::Yaml,
        )
        .unwrap();
        let text = map["data"]["pool.yaml"].as_str().unwrap();
        let mut cfg: PoolConfig = parse(text, ConfigFormat::Yaml).unwrap();
        assert_eq!(cfg.name, "NODE_NAME", "the DaemonSet replaces it");
        // The key comes from a Secret in the cluster; validate the rest here.
        cfg.api_key_env = None;
        if cfg!(feature = "docker") {
            cfg.validate().unwrap();
        }
    }

    #[test]
    fn typos_fail_loudly() {
        let err = parse::<PoolConfig>("capacty: 3\n", ConfigFormat::Yaml).unwrap_err();
        assert!(err.to_string().contains("capacty"), "{err}");
        let err = parse::<PoolConfig>(
            "images:\n  - warm: 1\n    docker: {image: x, memroy_bytes: 3}\n",
            ConfigFormat::Yaml,
        )
        .unwrap_err();
        assert!(err.to_string().contains("memroy_bytes"), "{err}");
    }
}
