//! The conformance suite on `uniagent_core::testing::ScriptedDeployment`, the in-memory sandbox
//! that tests of the loop and the tools run on: what it claims (files) must hold as on a real
//! backend, directly and through the `Arc` and `Box` forwarding impls; what it does not claim
//! (a shell behind sessions and commands) is skipped, not faked.

#![cfg(feature = "conformance")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure

use std::sync::Arc;

use uniagent_core::testing::ScriptedDeployment;
use uniagent_core::Deployment;
use uniagent_sandboxes::conformance;

/// What a sandbox without a shell (files only) passes; every other check needs sessions,
/// commands or archive extraction and is skipped.
const CLAIMED: &[&str] = &["start_and_alive", "text_files", "stop_is_idempotent"];

async fn passes_what_it_claims(deployment: &dyn Deployment, how: &str) {
    let report = conformance::run_all(deployment).await;
    println!("{how}: {}", report.summary());
    assert!(report.is_success(), "{how}: {}", report.summary());
    assert_eq!(report.passed, CLAIMED, "{how}");
    let skipped: Vec<&str> = report.skipped.iter().map(|(name, _)| *name).collect();
    let unclaimed: Vec<&str> = conformance::CHECKS
        .iter()
        .copied()
        .filter(|check| !CLAIMED.contains(check))
        .collect();
    assert_eq!(skipped, unclaimed, "{how}");
}

#[tokio::test]
async fn scripted_deployment_passes_the_checks_of_what_it_claims() {
    passes_what_it_claims(&ScriptedDeployment::new(), "ScriptedDeployment").await;
}

#[tokio::test]
async fn shared_and_boxed_scripted_deployments_pass_the_same_checks() {
    let shared = Arc::new(ScriptedDeployment::new());
    passes_what_it_claims(&shared, "Arc<ScriptedDeployment>").await;
    let boxed: Box<dyn Deployment> = Box::new(ScriptedDeployment::new());
    passes_what_it_claims(&boxed, "Box<dyn Deployment>").await;
    let both: Arc<Box<dyn Deployment>> = Arc::new(Box::new(ScriptedDeployment::new()));
    passes_what_it_claims(&both, "Arc<Box<dyn Deployment>>").await;
}
