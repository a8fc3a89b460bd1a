//! The conformance suite on the `remote` backend, against our `uniagent-sandbox` started by the
//! test on a free port.

#![cfg(all(feature = "conformance", feature = "remote", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure

mod swerex_common;

use swerex_common::{our_server_binary, ServerUnderTest};
use uniagent_sandboxes::{conformance, RemoteConfig, RemoteDeployment};

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
async fn a_wrong_token_fails_fast_and_a_missing_server_times_out() {
    use uniagent_core::{Deployment, ErrorKind};
    let server = ServerUnderTest::start(&our_server_binary(), &[]).await;
    let config = RemoteConfig {
        url: server.url.clone(),
        auth_token: Some("wrong".into()),
        ..RemoteConfig::default()
    };
    let started = std::time::Instant::now();
    let err = RemoteDeployment::new(config)
        .unwrap()
        .start()
        .await
        .unwrap_err();
    assert!(
        !err.is_retryable() && err.to_string().contains("auth token"),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "a rejected token must not be waited out"
    );
    let wrong = uniagent_sandboxes::RemoteRuntime::new(
        &server.url,
        Some("wrong".into()),
        Default::default(),
    )
    .unwrap();
    let err = wrong
        .execute(&uniagent_core::sandbox::Command::shell(
            "echo hi",
            Some(5.0),
        ))
        .await
        .unwrap_err();
    assert!(
        !err.is_retryable() && err.to_string().contains("auth token"),
        "{err}"
    );

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
