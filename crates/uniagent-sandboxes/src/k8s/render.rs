//! The objects the backend writes, rendered from its settings: per image a `SandboxTemplate` and
//! a `SandboxWarmPool` (applied server-side, named after the image and the rendered spec), per
//! sandbox a `SandboxClaim`.
//!
//! The template's pod installs `uniagent-sandbox` from the carrier image with an init container
//! into an `emptyDir`, runs it in the task image with the public keys mounted from a ConfigMap
//! and its own name from the downward API, and sets no other environment: a claim never sets
//! one either (that would force a cold start, and the template forbids it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector,
    PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext,
    TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use uniagent_core::{Error, Result};

use super::crd::{
    Lifecycle, NameRef, NetworkPolicySpec, PodMetadata, PodTemplate, SandboxClaim,
    SandboxClaimSpec, SandboxTemplate, SandboxTemplateSpec, SandboxWarmPool, SandboxWarmPoolSpec,
    UpdateStrategy, LABEL_CREATED_BY,
};
use super::names::{label_value, template_name};
use super::K8sConfig;
use crate::owner::Owner;

/// The port the server listens on in every sandbox.
pub const SERVER_PORT: u16 = 8000;
/// Where the init container installs the server.
const INSTALL_DIR: &str = "/uniagent";
/// Where the public keys are mounted; the ConfigMap's key is `keys`.
const KEYS_DIR: &str = "/etc/uniagent/keys";
/// Label: the run a claim belongs to.
pub const LABEL_RUN_ID: &str = "uniagent.dev/run-id";
/// Label: the rollout a claim serves.
pub const LABEL_ROLLOUT: &str = "uniagent.dev/rollout";
/// Label: the process that created a claim (host, pid, start ticks; hashed when too long for a
/// label value).
pub const LABEL_OWNER: &str = "uniagent.dev/owner";
/// Annotation: the creating process as `host:pid:start-ticks`, never hashed (the reaper reads
/// it to tell whether the owner is gone).
pub const ANNOTATION_OWNER: &str = "uniagent.dev/owner";

/// The template and warm pool of one image, sharing one name.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateAndPool {
    /// Their name.
    pub name: String,
    /// The `SandboxTemplate`.
    pub template: SandboxTemplate,
    /// The `SandboxWarmPool`.
    pub pool: SandboxWarmPool,
}

/// The template and pool for `image` (already filled in for its task).
///
/// ```
/// use uniagent_sandboxes::k8s::{render, K8sConfig};
///
/// let cfg = K8sConfig { carrier_image: "carrier:1".into(), ..K8sConfig::default() };
/// let rendered = render::template_and_pool(&cfg, "python:3.12-slim").unwrap();
/// assert!(rendered.name.starts_with("ua-python-3-12-slim-"));
/// assert_eq!(rendered.pool.spec.sandbox_template_ref.name, rendered.name);
/// // The same settings give the same names on the next run.
/// assert_eq!(render::template_and_pool(&cfg, "python:3.12-slim").unwrap(), rendered);
/// ```
pub fn template_and_pool(cfg: &K8sConfig, image: &str) -> Result<TemplateAndPool> {
    let spec = template_spec(cfg, image);
    let spec_json = serde_json::to_vec(&spec)
        .map_err(|e| Error::internal(format!("rendering the sandbox template: {e}")))?;
    let name = template_name(image, &spec_json);
    let metadata = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(cfg.namespace.clone()),
        labels: Some(created_by()),
        ..ObjectMeta::default()
    };
    let template = SandboxTemplate {
        metadata: metadata.clone(),
        spec,
    };
    let pool = SandboxWarmPool {
        metadata,
        spec: SandboxWarmPoolSpec {
            replicas: i32::try_from(cfg.warm)
                .map_err(|_| Error::config("k8s.warm is too large"))?,
            sandbox_template_ref: NameRef { name: name.clone() },
            update_strategy: Some(UpdateStrategy {
                kind: "Recreate".into(),
            }),
        },
        status: None,
    };
    Ok(TemplateAndPool {
        name,
        template,
        pool,
    })
}

/// A claim named `name` on the warm pool `pool`, labelled with the run, the rollout and the
/// owning process, ending by itself at `shutdown_unix` (seconds) unless renewed.
pub fn claim(
    cfg: &K8sConfig,
    name: &str,
    pool: &str,
    labels: &ClaimLabels,
    shutdown_unix: i64,
) -> Result<SandboxClaim> {
    let mut all = created_by();
    all.insert(LABEL_RUN_ID.into(), label_value(&labels.run_id));
    if let Some(rollout) = &labels.rollout {
        all.insert(LABEL_ROLLOUT.into(), label_value(rollout));
    }
    all.insert(LABEL_OWNER.into(), labels.owner_label());
    Ok(SandboxClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(all),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_OWNER.to_owned(),
                labels.owner.label(),
            )])),
            ..ObjectMeta::default()
        },
        spec: SandboxClaimSpec {
            warm_pool_ref: NameRef { name: pool.into() },
            lifecycle: Some(Lifecycle {
                shutdown_time: Some(rfc3339(shutdown_unix)?),
                shutdown_policy: Some("DeleteForeground".into()),
                ttl_seconds_after_finished: None,
            }),
        },
        status: None,
    })
}

/// What a claim's labels say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimLabels {
    /// The run (every claim of a run is found by it).
    pub run_id: String,
    /// The rollout, when known.
    pub rollout: Option<String>,
    /// The owning process: labelled `host.pid.start-ticks`, annotated `host:pid:start-ticks`.
    pub owner: Owner,
}

impl ClaimLabels {
    /// The value of the [`LABEL_OWNER`] label.
    pub fn owner_label(&self) -> String {
        label_value(&self.owner.dotted())
    }
}

/// `secs` since the epoch as RFC 3339 in UTC (`2026-12-06T10:00:00Z`).
pub fn rfc3339(secs: i64) -> Result<String> {
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .map_err(|e| Error::internal(format!("time {secs} out of range: {e}")))
}

fn created_by() -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_CREATED_BY.to_owned(), "uniagent".to_owned())])
}

fn template_spec(cfg: &K8sConfig, image: &str) -> SandboxTemplateSpec {
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "uniagent-sandbox".to_owned(),
        ),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "uniagent".to_owned(),
        ),
    ]);
    SandboxTemplateSpec {
        pod_template: PodTemplate {
            metadata: Some(PodMetadata {
                labels,
                annotations: BTreeMap::new(),
            }),
            spec: pod_spec(cfg, image),
        },
        network_policy: Some(network_policy(cfg)),
        network_policy_management: Some("Managed".into()),
        env_vars_injection_policy: Some("Disallowed".into()),
    }
}

fn pod_spec(cfg: &K8sConfig, image: &str) -> PodSpec {
    let limits = BTreeMap::from([
        (
            "cpu".to_owned(),
            Quantity(format!("{}m", cpu_millis(cfg.cpus))),
        ),
        ("memory".to_owned(), Quantity(cfg.memory_bytes.to_string())),
    ]);
    let small = BTreeMap::from([
        ("cpu".to_owned(), Quantity("100m".into())),
        ("memory".to_owned(), Quantity("32Mi".into())),
    ]);
    let no_escalation = SecurityContext {
        allow_privilege_escalation: Some(false),
        ..SecurityContext::default()
    };
    let install = Container {
        name: "install-uniagent-sandbox".into(),
        image: Some(cfg.carrier_image.clone()),
        command: Some(vec![
            "/bin/cp".into(),
            "/uniagent-sandbox".into(),
            format!("{INSTALL_DIR}/uniagent-sandbox"),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(small.clone()),
            limits: Some(small),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..no_escalation.clone()
        }),
        volume_mounts: Some(vec![mount("uniagent", INSTALL_DIR, false)]),
        ..Container::default()
    };
    let server = Container {
        name: "sandbox".into(),
        image: Some(image.into()),
        command: Some(vec![format!("{INSTALL_DIR}/uniagent-sandbox")]),
        args: Some(vec![
            "--host=0.0.0.0".into(),
            format!("--port={SERVER_PORT}"),
            format!("--auth-public-key-file={KEYS_DIR}/keys"),
        ]),
        working_dir: Some(cfg.work_dir.clone()),
        // The server's own name, from the pod (the downward API), not from the claim.
        env: Some(vec![EnvVar {
            name: "UNIAGENT_SANDBOX_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("swerex".into()),
            container_port: i32::from(SERVER_PORT),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(SERVER_PORT)),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(1),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(limits.clone()),
            limits: Some(limits),
            ..ResourceRequirements::default()
        }),
        security_context: Some(no_escalation),
        volume_mounts: Some(vec![
            mount("uniagent", INSTALL_DIR, true),
            mount("keys", KEYS_DIR, true),
        ]),
        ..Container::default()
    };
    PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        termination_grace_period_seconds: Some(5),
        security_context: Some(PodSecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        init_containers: Some(vec![install]),
        containers: vec![server],
        volumes: Some(vec![
            Volume {
                name: "uniagent".into(),
                empty_dir: Some(Default::default()),
                ..Volume::default()
            },
            Volume {
                name: "keys".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: cfg.keys_config_map.clone(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
        ]),
        ..PodSpec::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// Ingress from the workers on the server's port; egress only as configured (none: all denied).
fn network_policy(cfg: &K8sConfig) -> NetworkPolicySpec {
    let ingress = NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(cfg.ingress_from.clone()),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(vec![tcp_port(SERVER_PORT)]),
    };
    let egress = cfg
        .egress
        .iter()
        .map(|rule| NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: rule.cidr.clone(),
                    ..IPBlock::default()
                }),
                ..NetworkPolicyPeer::default()
            }]),
            ports: rule.port.map(|p| vec![tcp_port(p)]),
        })
        .collect();
    NetworkPolicySpec {
        ingress: vec![ingress],
        egress,
    }
}

fn tcp_port(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::Int(i32::from(port))),
        ..NetworkPolicyPort::default()
    }
}

/// Cores as whole millicores (at least 1).
fn cpu_millis(cpus: f64) -> u64 {
    ((cpus * 1000.0).round() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::EgressRule;

    #[test]
    fn changed_limits_or_egress_give_new_names_and_images_differ() {
        let cfg = K8sConfig {
            carrier_image: "c:1".into(),
            ..K8sConfig::default()
        };
        let base = template_and_pool(&cfg, "img:1").unwrap().name;
        let more_cpu = K8sConfig {
            cpus: 2.0,
            ..cfg.clone()
        };
        let egress = K8sConfig {
            egress: vec![EgressRule {
                cidr: "10.0.0.1/32".into(),
                port: Some(443),
            }],
            ..cfg.clone()
        };
        let names = [
            base.clone(),
            template_and_pool(&more_cpu, "img:1").unwrap().name,
            template_and_pool(&egress, "img:1").unwrap().name,
            template_and_pool(&cfg, "img:2").unwrap().name,
        ];
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), 4, "{names:?}");
        // The warm count is the pool's, not the template's: changing it keeps the name.
        let warmer = K8sConfig { warm: 9, ..cfg };
        assert_eq!(template_and_pool(&warmer, "img:1").unwrap().name, base);
    }

    #[test]
    fn a_claim_carries_its_labels_pool_and_leak_guard() {
        let cfg = K8sConfig::default();
        let labels = ClaimLabels {
            run_id: "run/1".into(),
            rollout: Some("task-1:0".into()),
            owner: Owner {
                host: "host".into(),
                pid: 42,
                start_ticks: 1000,
            },
        };
        let claim = claim(
            &cfg,
            "ua-run-1-abc",
            "ua-img-0123abcd",
            &labels,
            1_800_000_000,
        )
        .unwrap();
        let json = serde_json::to_value(&claim).unwrap();
        assert_eq!(json["apiVersion"], "extensions.agents.x-k8s.io/v1beta1");
        assert_eq!(json["kind"], "SandboxClaim");
        assert_eq!(json["spec"]["warmPoolRef"]["name"], "ua-img-0123abcd");
        assert_eq!(
            json["spec"]["lifecycle"]["shutdownTime"],
            "2027-01-15T08:00:00Z"
        );
        assert_eq!(
            json["spec"]["lifecycle"]["shutdownPolicy"],
            "DeleteForeground"
        );
        assert!(json["spec"].get("env").is_none());
        let labels = &json["metadata"]["labels"];
        // `:` is not allowed in a label value: the value is its stable hash.
        assert_eq!(labels[LABEL_ROLLOUT], label_value("task-1:0").as_str());
        assert!(label_value("task-1:0").starts_with("h-"));
        assert!(labels[LABEL_RUN_ID].as_str().unwrap().starts_with("h-"));
        assert_eq!(labels[LABEL_CREATED_BY], "uniagent");
    }
}
