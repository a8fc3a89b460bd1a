//! The `k8s` backend's settings and their checks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::{duration_secs, Error, Result, RetryConfig};

use crate::config::{check_positive, check_url, BackendConfig};

/// How the worker reaches a sandbox's server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// `http://<pod IP>:8000`: the worker runs in the cluster and the template's ingress admits
    /// it.
    #[default]
    PodIp,
    /// Through the agent-sandbox router at `router_url` (`X-Sandbox-ID`, `X-Sandbox-Namespace`,
    /// `X-Sandbox-Port` headers): the worker runs outside the cluster.
    Router,
    /// Through the API server's pod port-forward, one local listener per sandbox (as `kubectl
    /// port-forward`): for development against a cluster without a router; every connection
    /// goes through the API server.
    PortForward,
}

/// What a claim served by a cold start (no warm sandbox was ready) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnColdStart {
    /// Wait for it (counted in `uniagent_k8s_cold_starts_total`).
    #[default]
    Wait,
    /// Delete the claim and fail with a retryable sandbox error.
    Fail,
}

/// One egress rule of the sandboxes' network policy: a CIDR and optionally one TCP port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRule {
    /// Destination block, e.g. `10.0.0.5/32`.
    pub cidr: String,
    /// Destination TCP port; all ports when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// Settings of the `k8s` backend: sandboxes claimed from agent-sandbox warm pools.
///
/// ```
/// use uniagent_core::config::{parse, ConfigFormat};
/// use uniagent_sandboxes::k8s::K8sConfig;
///
/// let cfg: K8sConfig = parse(
///     "namespace: agents\nimage: swe-{instance_id}:latest\ncarrier_image: registry/uniagent-sandbox:0.1\nwarm: 4\nsigning_key_file: /etc/uniagent/key\n",
///     ConfigFormat::Yaml,
/// ).unwrap();
/// assert!(cfg.check().is_ok());
/// assert_eq!(cfg.claim_ttl.as_secs(), 300);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct K8sConfig {
    /// Namespace of templates, pools and claims.
    pub namespace: String,
    /// The task image (a per-task template such as `swe-{instance_id}:latest`).
    pub image: String,
    /// An image holding the static `uniagent-sandbox` at `/uniagent-sandbox` and a static `cp`,
    /// run as the init container that installs the server into the pod.
    pub carrier_image: String,
    /// Working directory of the server in the task image.
    pub work_dir: String,
    /// CPU request and limit in cores.
    pub cpus: f64,
    /// Memory request and limit in bytes.
    pub memory_bytes: u64,
    /// Ready sandboxes kept per image (the warm pool's `replicas`; 0: every claim cold-starts).
    pub warm: u32,
    /// Where sandboxes may connect (none by default: all egress is denied).
    pub egress: Vec<EgressRule>,
    /// Labels of the worker pods, whose connections the sandboxes admit on port 8000.
    pub ingress_from: BTreeMap<String, String>,
    /// How the worker reaches a sandbox.
    pub reach: Reach,
    /// Base URL of the agent-sandbox router (`reach: router`).
    pub router_url: Option<String>,
    /// Environment variable holding a bearer token for the router's own authorization.
    pub router_token_env: Option<String>,
    /// API server URL; by default the in-cluster service account, else the kubeconfig.
    pub api_url: Option<String>,
    /// Kubeconfig file (default `$KUBECONFIG`, else `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    pub context: Option<String>,
    /// Create the template and pool of each image by server-side apply (`false`: they must
    /// exist, named by `template`).
    pub manage_templates: bool,
    /// Name of an existing template and warm pool (`manage_templates: false`).
    pub template: Option<String>,
    /// ConfigMap (key `keys`) of the public keys the sandboxes accept tokens of.
    pub keys_config_map: String,
    /// File holding the worker's Ed25519 private key (base64 of the 32-byte seed).
    pub signing_key_file: Option<PathBuf>,
    /// Key id of that key in the key file.
    pub key_id: String,
    /// A claim's leak guard: its `shutdownTime` is this far ahead, renewed every third of it
    /// while the sandbox is in use.
    #[serde(with = "duration_secs")]
    pub claim_ttl: Duration,
    /// Longest life of one sandbox (the expiry of its token).
    #[serde(with = "duration_secs")]
    pub max_lifetime: Duration,
    /// Deadline from claim creation to a Ready claim.
    #[serde(with = "duration_secs")]
    pub start_timeout: Duration,
    /// Deadline from Ready to the server answering `is_alive`.
    #[serde(with = "duration_secs")]
    pub probe_timeout: Duration,
    /// How long `stop` waits for the claim to be gone.
    #[serde(with = "duration_secs")]
    pub delete_timeout: Duration,
    /// Deadline of one API request, and transport timeout of sandbox requests without a
    /// command timeout.
    #[serde(with = "duration_secs")]
    pub api_timeout: Duration,
    /// What a claim served by a cold start does.
    pub on_cold_start: OnColdStart,
    /// Run id every claim is labelled with (`uniagent k8s reap --run` deletes a run's claims).
    /// Default: `$UNIAGENT_RUN_ID`, else a random id per process.
    pub run_id: Option<String>,
    /// Retries of retryable API failures (quota, 429, 5xx, unreachable).
    pub retry: RetryConfig,
}

impl Default for K8sConfig {
    fn default() -> Self {
        Self {
            namespace: "uniagent-agent-sandboxes".into(),
            image: String::new(),
            carrier_image: String::new(),
            work_dir: "/work".into(),
            cpus: 1.0,
            memory_bytes: 2 << 30,
            warm: 2,
            egress: Vec::new(),
            ingress_from: BTreeMap::from([(
                "app.kubernetes.io/name".to_owned(),
                "uniagent-worker".to_owned(),
            )]),
            reach: Reach::PodIp,
            router_url: None,
            router_token_env: None,
            api_url: None,
            kubeconfig: None,
            context: None,
            manage_templates: true,
            template: None,
            keys_config_map: "uniagent-sandbox-keys".into(),
            signing_key_file: None,
            key_id: "k1".into(),
            claim_ttl: Duration::from_secs(300),
            max_lifetime: Duration::from_secs(6 * 3600),
            start_timeout: Duration::from_secs(120),
            probe_timeout: Duration::from_secs(10),
            delete_timeout: Duration::from_secs(30),
            api_timeout: Duration::from_secs(10),
            on_cold_start: OnColdStart::Wait,
            run_id: None,
            retry: RetryConfig::default(),
        }
    }
}

impl K8sConfig {
    /// Checks that the values are in range; errors name the key as `k8s.key`.
    pub fn check(&self) -> Result<()> {
        if !is_dns_label(&self.namespace) {
            return Err(Error::config(format!(
                "k8s.namespace must be a DNS-1123 label, got `{}`",
                self.namespace
            )));
        }
        if self.manage_templates {
            if self.image.trim().is_empty() {
                return Err(Error::config("k8s.image must name the task image"));
            }
            if self.carrier_image.trim().is_empty() {
                return Err(Error::config(
                    "k8s.carrier_image must name the image that carries uniagent-sandbox (manage_templates: true)",
                ));
            }
        } else if !self.template.as_deref().is_some_and(is_dns_label) {
            return Err(Error::config(
                "k8s.template must name an existing template and warm pool (manage_templates: false)",
            ));
        }
        if !(self.cpus > 0.0 && self.cpus.is_finite()) {
            return Err(Error::config("k8s.cpus must be a positive number"));
        }
        if self.memory_bytes < 6 << 20 {
            return Err(Error::config("k8s.memory_bytes must be at least 6 MiB"));
        }
        if self.warm > i32::MAX as u32 {
            return Err(Error::config("k8s.warm is too large"));
        }
        for rule in &self.egress {
            check_cidr(&rule.cidr)?;
        }
        if self.reach == Reach::Router {
            match &self.router_url {
                Some(url) => check_url("k8s.router_url", url)?,
                None => {
                    return Err(Error::config(
                        "k8s.router_url is required with reach: router",
                    ))
                }
            }
        }
        if let Some(url) = &self.api_url {
            check_url("k8s.api_url", url)?;
        }
        if self.signing_key_file.is_none() {
            return Err(Error::config(
                "k8s.signing_key_file must name the worker's Ed25519 private key (base64 of its 32-byte seed, see docs/formats.md)",
            ));
        }
        if self.key_id.is_empty() || self.key_id.chars().any(char::is_whitespace) {
            return Err(Error::config("k8s.key_id must be a word without spaces"));
        }
        for (key, value) in [
            ("k8s.claim_ttl", self.claim_ttl),
            ("k8s.max_lifetime", self.max_lifetime),
            ("k8s.start_timeout", self.start_timeout),
            ("k8s.probe_timeout", self.probe_timeout),
            ("k8s.delete_timeout", self.delete_timeout),
            ("k8s.api_timeout", self.api_timeout),
        ] {
            check_positive(key, value)?;
        }
        if self.claim_ttl < Duration::from_secs(30) {
            return Err(Error::config(
                "k8s.claim_ttl must be at least 30 seconds (it is renewed every third of it)",
            ));
        }
        self.retry.validate()
    }
}

impl BackendConfig for K8sConfig {
    fn validate(&self) -> Result<()> {
        self.check()
    }

    /// The image is a per-task template (`swe-{instance_id}`), as docker's.
    fn per_task_fields(&mut self) -> Vec<(&'static str, &mut String)> {
        vec![("image", &mut self.image)]
    }
}

#[cfg(feature = "k8s")]
#[async_trait::async_trait]
impl crate::config::BackendBuilder for K8sConfig {
    fn build(&self) -> Result<Box<dyn uniagent_core::Deployment>> {
        Ok(Box::new(super::K8sDeployment::new(self.clone())?))
    }

    /// The signing key reads, the API server answers and the worker may list claims in the
    /// namespace.
    async fn preflight(&self) -> Result<()> {
        super::K8sDeployment::new(self.clone())?;
        super::preflight(self).await
    }
}

/// A DNS-1123 label: 1 to 63 lowercase alphanumerics or `-`, alphanumeric at both ends.
fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// `a.b.c.d/n` (IPv4) or an IPv6 address with a prefix length.
fn check_cidr(cidr: &str) -> Result<()> {
    let bad = || {
        Error::config(format!(
            "k8s.egress cidr must be ADDRESS/PREFIX, got `{cidr}`"
        ))
    };
    let (address, prefix) = cidr.split_once('/').ok_or_else(bad)?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    match address.parse::<std::net::IpAddr>().map_err(|_| bad())? {
        std::net::IpAddr::V4(_) if prefix <= 32 => Ok(()),
        std::net::IpAddr::V6(_) if prefix <= 128 => Ok(()),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use uniagent_core::config::{parse, ConfigFormat};

    use super::*;

    fn valid() -> K8sConfig {
        K8sConfig {
            image: "python:3.12-slim".into(),
            carrier_image: "carrier:1".into(),
            signing_key_file: Some("/k".into()),
            ..K8sConfig::default()
        }
    }

    #[test]
    fn bad_values_are_named() {
        assert!(valid().check().is_ok());
        let cases: Vec<(K8sConfig, &str)> = vec![
            (
                K8sConfig {
                    namespace: "Bad_NS".into(),
                    ..valid()
                },
                "k8s.namespace",
            ),
            (
                K8sConfig {
                    image: " ".into(),
                    ..valid()
                },
                "k8s.image",
            ),
            (
                K8sConfig {
                    carrier_image: String::new(),
                    ..valid()
                },
                "k8s.carrier_image",
            ),
            (
                K8sConfig {
                    manage_templates: false,
                    ..valid()
                },
                "k8s.template",
            ),
            (
                K8sConfig {
                    cpus: 0.0,
                    ..valid()
                },
                "k8s.cpus",
            ),
            (
                K8sConfig {
                    memory_bytes: 0,
                    ..valid()
                },
                "k8s.memory_bytes",
            ),
            (
                K8sConfig {
                    egress: vec![EgressRule {
                        cidr: "10.0.0.1".into(),
                        port: None,
                    }],
                    ..valid()
                },
                "cidr",
            ),
            (
                K8sConfig {
                    egress: vec![EgressRule {
                        cidr: "10.0.0.1/33".into(),
                        port: None,
                    }],
                    ..valid()
                },
                "cidr",
            ),
            (
                K8sConfig {
                    reach: Reach::Router,
                    ..valid()
                },
                "k8s.router_url",
            ),
            (
                K8sConfig {
                    api_url: Some("ftp://x".into()),
                    ..valid()
                },
                "k8s.api_url",
            ),
            (
                K8sConfig {
                    signing_key_file: None,
                    ..valid()
                },
                "k8s.signing_key_file",
            ),
            (
                K8sConfig {
                    key_id: "a b".into(),
                    ..valid()
                },
                "k8s.key_id",
            ),
            (
                K8sConfig {
                    claim_ttl: Duration::from_secs(5),
                    ..valid()
                },
                "k8s.claim_ttl",
            ),
            (
                K8sConfig {
                    start_timeout: Duration::ZERO,
                    ..valid()
                },
                "k8s.start_timeout",
            ),
        ];
        for (cfg, key) in cases {
            let err = cfg.check().unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
        let existing = K8sConfig {
            manage_templates: false,
            template: Some("ua-python-0123abcd".into()),
            image: String::new(),
            carrier_image: String::new(),
            ..valid()
        };
        assert!(existing.check().is_ok());
        let v6 = K8sConfig {
            egress: vec![EgressRule {
                cidr: "fd00::1/128".into(),
                port: Some(443),
            }],
            ..valid()
        };
        assert!(v6.check().is_ok());
    }

    #[test]
    fn settings_round_trip_and_typos_are_named() {
        let cfg = K8sConfig {
            egress: vec![EgressRule {
                cidr: "10.1.2.3/32".into(),
                port: Some(8080),
            }],
            reach: Reach::Router,
            router_url: Some("http://router:8080".into()),
            ..valid()
        };
        for format in [ConfigFormat::Yaml, ConfigFormat::Json] {
            let text = uniagent_core::config::to_string(&cfg, format).unwrap();
            assert_eq!(parse::<K8sConfig>(&text, format).unwrap(), cfg, "{text}");
        }
        let err = parse::<K8sConfig>("namespce: x\n", ConfigFormat::Yaml).unwrap_err();
        assert!(err.to_string().contains("namespce"), "{err}");
        let err = parse::<K8sConfig>("reach: tunnel\n", ConfigFormat::Yaml).unwrap_err();
        assert!(err.to_string().contains("tunnel"), "{err}");
    }
}
