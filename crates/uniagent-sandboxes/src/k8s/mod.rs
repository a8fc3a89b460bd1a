//! The `k8s` backend: sandboxes on Kubernetes through the kubernetes-sigs agent-sandbox
//! controller's claims (`SandboxClaim` on a `SandboxWarmPool` of a `SandboxTemplate`), driven
//! with kube-rs (design: `docs/decisions/0008-k8s-sandboxes.md`).
//!
//! - [`K8sConfig`] (parsed in every build, `type: k8s`) and [`K8sDeployment`] (feature `k8s`);
//! - [`crd`]: the agent-sandbox kinds; [`names`]: names and label values of what the backend
//!   creates; [`render`]: the template, pool and claim objects;
//! - [`watch`]: one watch of a run's claims per process; [`errors`]: what API answers mean;
//! - [`reaper`]: deleting a run's claims, and those of crashed workers (swept at start-up);
//! - `fake` (feature `k8s-fake`): a stand-in cluster for tests and benchmarks.

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
#[cfg(feature = "k8s-port-forward")]
mod forward;
#[cfg(feature = "k8s")]
pub mod names;
#[cfg(feature = "k8s")]
pub mod reaper;
#[cfg(feature = "k8s")]
pub mod render;
#[cfg(feature = "k8s")]
pub mod watch;

pub use config::*;
#[cfg(feature = "k8s")]
pub use deployment::{K8sDeployment, K8sInfo, StartTimings};

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
