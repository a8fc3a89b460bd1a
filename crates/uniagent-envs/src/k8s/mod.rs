//! The `k8s` backend: sandboxes on Kubernetes through the kubernetes-sigs agent-sandbox
//! controller's claims (`SandboxClaim` on a `SandboxWarmPool` of a `SandboxTemplate`), driven
//! with kube-rs (design: `docs/decisions/0008-k8s-sandboxes.md`).

#[cfg(feature = "k8s")]
pub mod crd;
#[cfg(feature = "k8s-fake")]
#[doc(hidden)]
pub mod fake;
#[cfg(feature = "k8s")]
pub mod names;
