//! The conformance suite on the `remote` backend, against our `uniagent-sandbox` started by the
//! test on a free port.

#![cfg(all(feature = "conformance", feature = "remote", feature = "server"))]

mod swerex_common;

use swerex_common::{our_server_binary, ServerUnderTest};
use uniagent_envs::{conformance, RemoteConfig, RemoteDeployment};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remote_deployment_passes_the_conformance_suite() {
    let server = ServerUnderTest::start(&our_server_binary(), &[]).await;
    let config = RemoteConfig {
        url: server.url.clone(),
        auth_token: Some(server.token.clone()),
        ..RemoteConfig::default()
    };
    let deployment = RemoteDeployment::new(config).unwrap();
    let report = conformance::run_all(&deployment).await;
    println!("{}", report.summary());
    assert!(report.is_success(), "{}", report.summary());
    assert_eq!(
        report.passed.len(),
        conformance::CHECKS.len(),
        "nothing may be skipped on remote:\n{}",
        report.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_a_non_retryable_error_and_no_server_is_unavailable() {
    use uniagent_core::{Deployment, DeploymentExt, ErrorKind};
    let server = ServerUnderTest::start(&our_server_binary(), &[]).await;
    let config = RemoteConfig {
        url: server.url.clone(),
        auth_token: Some("wrong".into()),
        ..RemoteConfig::default()
    };
    let deployment = RemoteDeployment::new(config).unwrap();
    deployment
        .start()
        .await
        .unwrap_or_else(|e| panic!("is_alive needs no valid token? {e}"));
    let err = deployment.sh("echo hi", 5.0).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("auth token"), "{err}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = RemoteConfig {
        url: format!("http://127.0.0.1:{port}"),
        timeout: std::time::Duration::from_millis(300),
        ..RemoteConfig::default()
    };
    let err = RemoteDeployment::new(config)
        .unwrap()
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}
