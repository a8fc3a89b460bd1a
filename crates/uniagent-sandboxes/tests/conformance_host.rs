//! The conformance suite on the `host` backend: our `uniagent-sandbox` as a child process,
//! directly and through the `Arc` and `Box` forwarding impls of `Deployment` (how the runner
//! and user code hold deployments), so that a trait method the forwarding forgot (falling back
//! to a default) fails here.

#![cfg(all(feature = "conformance", feature = "host", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure

use std::path::PathBuf;
use std::sync::Arc;

use uniagent_core::Deployment;
use uniagent_sandboxes::{conformance, HostConfig, HostDeployment};

fn host() -> HostDeployment {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"));
    HostDeployment::new(HostConfig {
        server_binary: Some(binary),
        ..HostConfig::default()
    })
}

async fn passes_everything(deployment: &dyn Deployment, how: &str) {
    let report = conformance::run_all(deployment).await;
    println!("{how}: {}", report.summary());
    assert!(report.is_success(), "{how}: {}", report.summary());
    assert_eq!(
        report.passed.len(),
        conformance::CHECKS.len(),
        "{how}: nothing may be skipped on host:\n{}",
        report.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn host_deployment_passes_the_conformance_suite() {
    passes_everything(&host(), "HostDeployment").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_and_boxed_host_deployments_pass_the_conformance_suite() {
    let shared: Arc<HostDeployment> = Arc::new(host());
    passes_everything(&shared, "Arc<HostDeployment>").await;
    let boxed: Box<dyn Deployment> = Box::new(host());
    passes_everything(&boxed, "Box<dyn Deployment>").await;
    let both: Arc<Box<dyn Deployment>> = Arc::new(Box::new(host()));
    passes_everything(&both, "Arc<Box<dyn Deployment>>").await;
}
