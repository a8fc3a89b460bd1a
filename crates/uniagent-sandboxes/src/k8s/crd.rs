//! The agent-sandbox kinds at `v1beta1` (v0.5.6's `k8s/crds`), with only the fields the backend
//! writes or reads; fields it does not know are ignored when reading, and never written.
//!
//! | kind | group |
//! |---|---|
//! | [`SandboxTemplate`], [`SandboxWarmPool`], [`SandboxClaim`] | `extensions.agents.x-k8s.io` |
//! | [`Sandbox`] | `agents.x-k8s.io` |

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::networking::v1::{NetworkPolicyEgressRule, NetworkPolicyIngressRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The label every object the backend creates carries, with the value `uniagent`.
pub const LABEL_CREATED_BY: &str = "agents.x-k8s.io/created-by";
/// The Sandbox label that says whether it came from a warm pool (`warm`) or was cold-started.
pub const LABEL_LAUNCH_TYPE: &str = "agents.x-k8s.io/launch-type";

/// A pod template for sandboxes: the image, the server as its command, limits, the key mount.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxTemplate",
    plural = "sandboxtemplates",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTemplateSpec {
    /// The pod every sandbox of this template runs.
    pub pod_template: PodTemplate,
    /// Ingress and egress rules of the sandboxes' network policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkPolicySpec>,
    /// `Managed`: the controller creates the network policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy_management: Option<String>,
    /// `Disallowed` (the default): claims may not set environment variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_vars_injection_policy: Option<String>,
}

/// `spec.podTemplate` of a template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct PodTemplate {
    /// Labels and annotations of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<PodMetadata>,
    /// The pod spec.
    pub spec: PodSpec,
}

/// Labels and annotations.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct PodMetadata {
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `spec.networkPolicy` of a template (an empty `egress` list blocks all egress).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct NetworkPolicySpec {
    /// Who may connect to the sandboxes.
    #[serde(default)]
    pub ingress: Vec<NetworkPolicyIngressRule>,
    /// Where the sandboxes may connect.
    #[serde(default)]
    pub egress: Vec<NetworkPolicyEgressRule>,
}

/// A pool of ready sandboxes of one template, adopted by claims.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxWarmPool",
    plural = "sandboxwarmpools",
    namespaced,
    status = "SandboxWarmPoolStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolSpec {
    /// Ready sandboxes kept (0: every claim is a cold start).
    pub replicas: i32,
    /// The template the sandboxes are made from.
    pub sandbox_template_ref: NameRef,
    /// How sandboxes of an older template are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
}

/// `spec.updateStrategy` of a warm pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct UpdateStrategy {
    /// `Recreate` or `OnReplenish`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// What a warm pool reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolStatus {
    /// Sandboxes ready for adoption.
    #[serde(default)]
    pub ready_replicas: Option<i32>,
}

/// A reference by name, in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct NameRef {
    /// The object's name.
    pub name: String,
}

/// One sandbox asked of a warm pool: the controller adopts a warm sandbox (or cold-starts one)
/// and reports it in `status.sandbox`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxClaim",
    plural = "sandboxclaims",
    namespaced,
    status = "SandboxClaimStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimSpec {
    /// The pool to adopt from.
    pub warm_pool_ref: NameRef,
    /// When the claim ends by itself (the leak guard) and what then happens to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
}

/// `spec.lifecycle` of a claim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// RFC 3339 time after which the sandbox is shut down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_time: Option<String>,
    /// `Retain` (the default), `Delete` or `DeleteForeground`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_policy: Option<String>,
    /// Seconds a finished claim is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// What the controller reports on a claim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimStatus {
    /// `Ready` (forwarded from the Sandbox) and `Finished`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The sandbox the claim holds, once adopted or created.
    #[serde(default)]
    pub sandbox: Option<ClaimedSandbox>,
}

/// `status.sandbox` of a claim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedSandbox {
    /// The Sandbox's (and its pod's) name.
    #[serde(default)]
    pub name: String,
    /// The pod's IPs.
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<String>,
}

/// A sandbox: one pod the controller runs from a template.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "agents.x-k8s.io",
    version = "v1beta1",
    kind = "Sandbox",
    plural = "sandboxes",
    namespaced,
    status = "SandboxStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// The pod (read as opaque JSON: the backend only reads a Sandbox's status).
    #[serde(default)]
    pub pod_template: serde_json::Value,
}

/// What the controller reports on a Sandbox.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// `Ready`, `PodScheduled`, ...
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The pod's IPs.
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<String>,
}

/// The condition of `type` in `conditions`.
pub fn condition<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == kind)
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    #[test]
    fn kinds_have_the_agent_sandbox_paths() {
        assert_eq!(
            SandboxClaim::url_path(&(), Some("ns")),
            "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims"
        );
        assert_eq!(
            Sandbox::url_path(&(), Some("ns")),
            "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes"
        );
        assert_eq!(SandboxWarmPool::plural(&()), "sandboxwarmpools");
        assert_eq!(SandboxTemplate::kind(&()), "SandboxTemplate");
    }

    #[test]
    fn a_claim_status_reads_the_controllers_json() {
        let status: SandboxClaimStatus = serde_json::from_value(serde_json::json!({
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "SandboxReady", "message": "",
                "lastTransitionTime": "2026-12-06T10:00:00Z", "observedGeneration": 1
            }],
            "sandbox": {"name": "sb-1", "podIPs": ["10.0.0.7"]},
            "somethingNew": 1
        }))
        .unwrap();
        assert_eq!(
            condition(&status.conditions, "Ready").unwrap().status,
            "True"
        );
        assert_eq!(status.sandbox.unwrap().pod_ips, ["10.0.0.7"]);
    }
}
