//! The built-in tools on the host sandbox (`HostDeployment` running our `uniagent-sandbox`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

mod scenarios;

use std::sync::Arc;

use uniagent_core::Deployment;
use uniagent_envs::{HostConfig, HostDeployment};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_pass_the_scenarios_on_the_host_sandbox() {
    let server = match uniagent_envs::host::find_server_binary(None) {
        Ok(path) => path,
        // `cargo test --workspace` builds the server next to this test; `-p uniagent-tools` may not.
        Err(e) if std::env::var_os("UNIAGENT_SWEREX_VENV").is_none() => {
            eprintln!("SKIPPED: {e} (build it with `cargo build -p uniagent-envs --features server --bin uniagent-sandbox`)");
            return;
        }
        Err(e) => {
            panic!("scripts/test builds the whole workspace, so the server must be there: {e}")
        }
    };
    let work = tempfile::tempdir().unwrap();
    let config = HostConfig {
        server_binary: Some(server),
        ..HostConfig::default()
    };
    let deployment: Arc<dyn Deployment> = Arc::new(HostDeployment::new(config));
    deployment.start().await.unwrap();
    scenarios::run_all(deployment.clone(), work.path()).await;
    deployment.stop().await.unwrap();
}
