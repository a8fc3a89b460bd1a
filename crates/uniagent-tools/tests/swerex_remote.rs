//! The built-in tools over SWE-ReX's own Python server (`swerex-remote` from
//! `UNIAGENT_SWEREX_VENV`, installed by scripts/setup/20-swerex.sh): upload + run_in_session.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

mod scenarios;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use uniagent_core::testing::{free_port, sandbox_server_args};
use uniagent_core::Deployment;
use uniagent_sandboxes::{RemoteConfig, RemoteDeployment};

/// `swerex-remote` in the venv, `None` (skip) when the variable is unset; a set variable with
/// no server behind it is a failure, since CI installs it.
fn swerex_remote() -> Option<PathBuf> {
    let Some(venv) = std::env::var_os("UNIAGENT_SWEREX_VENV") else {
        eprintln!("SKIPPED: UNIAGENT_SWEREX_VENV is unset (scripts/test sets it after installing SWE-ReX)");
        return None;
    };
    let bin = PathBuf::from(venv).join("bin/swerex-remote");
    assert!(
        bin.is_file(),
        "UNIAGENT_SWEREX_VENV is set but {} is missing: run scripts/setup/20-swerex.sh",
        bin.display()
    );
    Some(bin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_pass_the_scenarios_on_swerex_remote() {
    let Some(bin) = swerex_remote() else { return };
    let port = free_port().unwrap();
    let token = format!("tok{:x}", fastrand::u64(..));
    let mut server = tokio::process::Command::new(bin)
        .args(sandbox_server_args(port, &token))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let config = RemoteConfig {
        url: format!("http://127.0.0.1:{port}"),
        auth_token: Some(token),
        timeout: Duration::from_secs(60),
        ..RemoteConfig::default()
    };
    let deployment: Arc<dyn Deployment> = Arc::new(RemoteDeployment::new(config).unwrap());
    deployment.start().await.unwrap();
    let work = tempfile::tempdir().unwrap();
    scenarios::run_all(deployment.clone(), work.path()).await;
    deployment.stop().await.unwrap();
    server.kill().await.unwrap();
}
