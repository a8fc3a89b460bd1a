//! The built-in tools on a docker sandbox (`DockerDeployment`: our server in a locked-down
//! container with no network), checked inside the container. Skips, saying why, only when no
//! Docker daemon is reachable; the sandbox image must then exist
//! (scripts/setup/40-docker-image.sh builds it, scripts/env/docker.sh names it).

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

mod scenarios;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use uniagent_core::{Deployment, DeploymentExt};
use uniagent_sandboxes::docker::{daemon_reachable, engine, list_managed};
use uniagent_sandboxes::{DockerConfig, DockerDeployment};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_pass_the_scenarios_on_a_docker_sandbox() {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED: no Docker daemon is reachable ({e})");
        return;
    }
    let image = std::env::var("UNIAGENT_DOCKER_IMAGE")
        .unwrap_or_else(|_| "uniagent-sandbox-base:latest".into());
    let docker = engine().await.unwrap();
    assert!(
        docker.inspect_image(&image).await.is_ok(),
        "the sandbox image `{image}` is missing: run scripts/build-sandbox-image.sh \
         (scripts/setup/40-docker-image.sh does it for scripts/test)"
    );
    // `cargo test --workspace` builds the server next to this test; `-p uniagent-tools` alone
    // may not, so say how.
    let server = uniagent_sandboxes::docker::Payload::locate(None, None)
        .unwrap_or_else(|e| {
            panic!("{e} (`cargo build -p uniagent-sandboxes --features server --bin uniagent-sandbox` builds it)")
        })
        .server;
    let run = format!("test-tools-{}-{:x}", std::process::id(), fastrand::u32(..));
    let config = DockerConfig {
        image,
        memory_bytes: Some(256 << 20),
        cpus: Some(1.0),
        lifetime: Some(Duration::from_secs(600)),
        server_binary: Some(server),
        toolbox_binary: Some(env!("CARGO_BIN_EXE_uniagent-toolbox").into()),
        run_id: Some(run.clone()),
        ..DockerConfig::default()
    };
    let deployment: Arc<dyn Deployment> = Arc::new(DockerDeployment::new(config));
    deployment.start().await.unwrap();
    // The toolbox came in with the server (DockerConfig::toolbox_binary).
    let version = deployment
        .sh(
            "/opt/uniagent/bin/uniagent-toolbox --version",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(version.exit_code, Some(0), "{version:?}");
    let work = Path::new("/work/scenarios");
    let made = deployment
        .sh("mkdir -p /work/scenarios", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(made.exit_code, Some(0), "{made:?}");
    scenarios::run_all_in_sandbox(deployment.clone(), work).await;
    deployment.stop().await.unwrap();
    assert!(
        list_managed(&docker, Some(&run)).await.unwrap().is_empty(),
        "the container is gone"
    );
}
