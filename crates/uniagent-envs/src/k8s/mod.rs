//! The `k8s` backend: sandboxes on Kubernetes through the kubernetes-sigs agent-sandbox
//! controller's claims (`SandboxClaim` on a `SandboxWarmPool` of a `SandboxTemplate`), driven
//! with kube-rs (design: `docs/decisions/0008-k8s-sandboxes.md`).
//!
//! In place so far: the settings ([`K8sConfig`], parsed in every build), the agent-sandbox kinds
//! ([`crd`]), the names of what the backend creates ([`names`]) and the objects themselves
//! ([`render`]), checked against the vendored CRDs' schemas. The deployment is registered as
//! `type: k8s` once it passes the conformance suite against the fake cluster.

#[cfg(feature = "k8s")]
mod claims;
#[cfg(feature = "k8s")]
pub mod client;
mod config;
#[cfg(feature = "k8s")]
pub mod crd;
#[cfg(feature = "k8s")]
mod deployment;
#[cfg(feature = "k8s")]
mod ensure;
#[cfg(feature = "k8s")]
pub mod errors;
#[cfg(feature = "k8s-fake")]
#[doc(hidden)]
pub mod fake;
#[cfg(feature = "k8s")]
pub mod names;
#[cfg(feature = "k8s")]
pub mod render;
#[cfg(feature = "k8s")]
pub mod watch;

pub use config::*;
#[cfg(feature = "k8s")]
pub use deployment::{K8sDeployment, K8sInfo};

/// Connects and lists one claim of the namespace: the API server answers and the worker's Role
/// lets it list claims there.
#[cfg(feature = "k8s")]
async fn preflight(cfg: &K8sConfig) -> uniagent_core::Result<()> {
    let conn = client::connect(cfg).await?;
    let api: kube::Api<crd::SandboxClaim> =
        kube::Api::namespaced(conn.client.clone(), &cfg.namespace);
    conn.call(
        "list",
        "sandboxclaims",
        &cfg.namespace,
        api.list_metadata(&kube::api::ListParams::default().limit(1)),
    )
    .await
    .map(|_| ())
    .map_err(|(_, e)| e)
}
