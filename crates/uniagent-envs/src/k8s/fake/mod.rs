//! A stand-in for a Kubernetes API server running the agent-sandbox controller and router, for
//! tests and benchmarks of the `k8s` backend (feature `k8s-fake`).
