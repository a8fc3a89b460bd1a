//! Our Rust `RemoteRuntime` drives a real SWE-ReX 1.4.0 `swerex-remote` (from the project venv)
//! through the shared scenario list `tests/swerex/scenarios.json`, and, as a control, our own
//! `uniagent-sandbox` through the same list.

#![cfg(all(feature = "server", feature = "client"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure
mod swerex_common;

use swerex_common::{our_server_binary, replay_scenarios, swerex_venv, ServerUnderTest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_drives_swerex_remote_through_the_scenarios() {
    let Some(venv) = swerex_venv() else { return };
    let server = ServerUnderTest::start(&venv.join("bin/swerex-remote"), &[]).await;
    let failures = replay_scenarios(&server.client()).await;
    assert!(
        failures.is_empty(),
        "against swerex-remote:\n{}",
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_drives_our_server_through_the_same_scenarios() {
    let server = ServerUnderTest::start(&our_server_binary(), &[]).await;
    let failures = replay_scenarios(&server.client()).await;
    assert!(
        failures.is_empty(),
        "against uniagent-sandbox:\n{}",
        failures.join("\n")
    );
}
