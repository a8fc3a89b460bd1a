//! Cleanup is real: when a process holding sandboxes is killed, `uniagent-docker cleanup
//! --run-id` (and the stale sweep) remove its labelled containers.

#![cfg(feature = "docker")]

mod docker_common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use docker_common::{config_or_skip, containers_of};
use uniagent_core::Deployment;
use uniagent_envs::docker::{engine, list_managed, reap_stale};
use uniagent_envs::DockerDeployment;

const HOLDER_ENV: &str = "UNIAGENT_TEST_DOCKER_HOLDER_RUN";

/// Not a test on its own: when re-executed by the tests below with [`HOLDER_ENV`] set, it starts
/// two sandboxes of that run and then waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_process() {
    let Ok(run) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let mut config = config_or_skip("holder").await.unwrap();
    config.run_id = Some(run);
    let a = DockerDeployment::new(config.clone());
    let b = DockerDeployment::new(config);
    a.start().await.unwrap();
    b.start().await.unwrap();
    println!("HOLDING");
    tokio::time::sleep(Duration::from_secs(300)).await;
}

/// Runs the holder for `run`, waits until it holds two containers, and SIGKILLs it.
async fn kill_a_holder(run: &str) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "holder_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER_ENV, run)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while containers_of(run).await < 2 {
        assert!(
            Instant::now() < deadline,
            "the holder never started its sandboxes"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the holder exited early"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let the second start finish (it is counted once created).
    tokio::time::sleep(Duration::from_secs(2)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        containers_of(run).await,
        2,
        "SIGKILL gives no chance to clean up"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_run_id_removes_the_containers_of_a_killed_process() {
    if config_or_skip("reaper").await.is_none() {
        return;
    }
    let run = docker_common::run_id("killed");
    kill_a_holder(&run).await;
    let out = Command::new(env!("CARGO_BIN_EXE_uniagent-docker"))
        .args(["cleanup", "--run-id", &run])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("removed ")).count(),
        2,
        "{stdout}"
    );
    assert_eq!(containers_of(&run).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_sweep_removes_containers_whose_owner_died_and_keeps_live_ones() {
    let Some(config) = config_or_skip("stale").await else {
        return;
    };
    let run = docker_common::run_id("orphaned");
    kill_a_holder(&run).await;
    let live_run = config.run_id.clone().unwrap();
    let live = DockerDeployment::new(config);
    live.start().await.unwrap();
    let docker = engine().await.unwrap();
    let orphans = list_managed(&docker, Some(&run)).await.unwrap();
    assert!(orphans
        .iter()
        .all(|c| c.owner.as_ref().unwrap().is_gone_here()));
    let reaped = reap_stale(&docker).await.unwrap();
    for orphan in &orphans {
        assert!(reaped.removed.contains(&orphan.id), "{reaped:?}");
    }
    assert_eq!(containers_of(&run).await, 0);
    assert_eq!(
        containers_of(&live_run).await,
        1,
        "a live owner's container stays"
    );
    live.stop().await.unwrap();
}
