//! The conformance suite on the `host` backend: our `uniagent-sandbox` as a child process.

#![cfg(all(feature = "conformance", feature = "host", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure

use std::path::PathBuf;

use uniagent_envs::{conformance, HostConfig, HostDeployment};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn host_deployment_passes_the_conformance_suite() {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"));
    let deployment = HostDeployment::new(HostConfig {
        server_binary: Some(binary),
        ..HostConfig::default()
    });
    let report = conformance::run_all(&deployment).await;
    println!("{}", report.summary());
    assert!(report.is_success(), "{}", report.summary());
    assert_eq!(
        report.passed.len(),
        conformance::CHECKS.len(),
        "nothing may be skipped on host:\n{}",
        report.summary()
    );
}
