//! Shared helpers of the docker tests: skip (printing why) only when no Docker daemon answers;
//! otherwise the sandbox image must exist (scripts/setup/40-docker-image.sh builds it).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

#[path = "../deadline_common/mod.rs"]
pub mod deadline;

use uniagent_sandboxes::docker::{daemon_reachable, engine, list_managed};
use uniagent_sandboxes::DockerConfig;

/// The image the tests use: `$UNIAGENT_DOCKER_IMAGE`, else the base image's `latest` tag.
pub fn image() -> String {
    std::env::var("UNIAGENT_DOCKER_IMAGE").unwrap_or_else(|_| "uniagent-sandbox-base:latest".into())
}

/// A small, locked-down configuration for `test`, with its own run id; `None` (after printing
/// why) when no Docker daemon is reachable.
pub async fn config_or_skip(test: &str) -> Option<DockerConfig> {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED {test}: no Docker daemon is reachable ({e})");
        return None;
    }
    let docker = engine().await.unwrap();
    let image = image();
    assert!(
        docker.inspect_image(&image).await.is_ok(),
        "the sandbox image `{image}` is missing: run scripts/build-sandbox-image.sh \
         (scripts/setup/40-docker-image.sh does it for scripts/test)"
    );
    Some(DockerConfig {
        image,
        memory_bytes: Some(128 << 20),
        cpus: Some(0.5),
        pids_limit: Some(128),
        lifetime: Some(Duration::from_secs(600)),
        server_binary: Some(env!("CARGO_BIN_EXE_uniagent-sandbox").into()),
        run_id: Some(run_id(test)),
        ..DockerConfig::default()
    })
}

/// A run id unique to this test and process; inside [`deadline::deadline`] its containers are
/// removed when the test fails.
pub fn run_id(test: &str) -> String {
    let run = format!("test-{test}-{}-{:x}", std::process::id(), fastrand::u32(..));
    deadline::track_run(&run);
    run
}

/// How many containers of `run` exist (any state).
pub async fn containers_of(run: &str) -> usize {
    let docker = engine().await.unwrap();
    list_managed(&docker, Some(run)).await.unwrap().len()
}
