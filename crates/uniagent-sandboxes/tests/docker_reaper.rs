//! Cleanup is real: when a process holding sandboxes is killed, `uniagent-docker cleanup
//! --run-id` (and the stale sweep) remove its labelled containers.

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

mod docker_common;

use docker_common::deadline::{deadline, DEFAULT};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use docker_common::{config_or_skip, containers_of};
use uniagent_core::Deployment;
use uniagent_sandboxes::docker::{engine, list_managed, reap_stale};
use uniagent_sandboxes::DockerDeployment;

const HOLDER_ENV: &str = "UNIAGENT_TEST_DOCKER_HOLDER_RUN";

/// Not a test on its own: when re-executed by the tests below with [`HOLDER_ENV`] set, it starts
/// two sandboxes of that run and then waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_process() {
    deadline("holder_process", DEFAULT, async {
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
    })
    .await;
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

/// One test, not two: the stale sweep is global and would take the other test's orphans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_processes_leave_containers_that_cleanup_and_the_stale_sweep_remove() {
    deadline(
        "killed_processes_leave_containers_that_cleanup_and_the_stale_sweep_remove",
        DEFAULT,
        async {
            let Some(config) = config_or_skip("reaper").await else {
                return;
            };
            // A live sandbox first (its start also runs this process's own startup sweep).
            let live_run = config.run_id.clone().unwrap();
            let live = DockerDeployment::new(config);
            live.start().await.unwrap();
            let (first, second) = (
                docker_common::run_id("killed"),
                docker_common::run_id("orphaned"),
            );
            tokio::join!(kill_a_holder(&first), kill_a_holder(&second));

            // `cleanup --run-id` removes exactly that run's containers.
            let out = Command::new(env!("CARGO_BIN_EXE_uniagent-docker"))
                .args(["cleanup", "--run-id", &first])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                stdout.lines().filter(|l| l.starts_with("removed ")).count(),
                2,
                "{stdout}"
            );
            assert_eq!(containers_of(&first).await, 0);
            assert_eq!(containers_of(&second).await, 2, "other runs are untouched");

            // The stale sweep removes the containers whose owner died, and keeps live ones.
            let docker = engine().await.unwrap();
            let orphans = list_managed(&docker, Some(&second)).await.unwrap();
            assert!(orphans
                .iter()
                .all(|c| c.owner.as_ref().unwrap().is_gone_here()));
            let reaped = reap_stale(&docker).await.unwrap();
            for orphan in &orphans {
                assert!(reaped.removed.contains(&orphan.id), "{reaped:?}");
            }
            assert_eq!(containers_of(&second).await, 0);
            assert_eq!(
                containers_of(&live_run).await,
                1,
                "a live owner's container stays"
            );
            live.stop().await.unwrap();
            assert_eq!(containers_of(&live_run).await, 0);
        },
    )
    .await;
}

/// The payload images built from `server` (a host path), by tag.
async fn payload_images_of(server: &std::path::Path) -> Vec<String> {
    use std::collections::HashMap;
    use uniagent_sandboxes::docker::{LABEL_PAYLOAD_FILES, PAYLOAD_REPO};
    let docker = engine().await.unwrap();
    let images = docker
        .list_images(Some(bollard::query_parameters::ListImagesOptions {
            filters: Some(HashMap::from([(
                "reference".to_owned(),
                vec![format!("{PAYLOAD_REPO}:*")],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap();
    let needle = serde_json::to_string(&server.display().to_string()).unwrap();
    images
        .into_iter()
        .filter(|i| {
            i.labels
                .get(LABEL_PAYLOAD_FILES)
                .is_some_and(|files| files.contains(&needle))
        })
        .flat_map(|i| i.repo_tags)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_images_of_rebuilt_or_deleted_binaries_are_pruned() {
    deadline(
        "payload_images_of_rebuilt_or_deleted_binaries_are_pruned",
        DEFAULT,
        async {
            let Some(mut config) = config_or_skip("prune").await else {
                return;
            };
            // A private copy of the server, "rebuilt" below by appending bytes (an ELF file runs the
            // same with trailing bytes).
            let dir = tempfile::tempdir().unwrap();
            let server = dir.path().join("uniagent-sandbox");
            std::fs::copy(config.server_binary.as_ref().unwrap(), &server).unwrap();
            config.server_binary = Some(server.clone());
            config.toolbox_binary = None;

            // A payload's first start uploads it into its container; the second commits it.
            for _ in 0..2 {
                let sandbox = DockerDeployment::new(config.clone());
                sandbox.start().await.unwrap();
                sandbox.stop().await.unwrap();
            }
            let old = payload_images_of(&server).await;
            assert_eq!(old.len(), 1, "{old:?}");

            let mut bytes = std::fs::read(&server).unwrap();
            bytes.extend_from_slice(b"rebuilt");
            std::fs::write(&server, bytes).unwrap();
            let first = DockerDeployment::new(config.clone());
            first.start().await.unwrap();
            first.stop().await.unwrap();
            assert_eq!(
                payload_images_of(&server).await,
                old,
                "the rebuilt payload's first start commits and prunes nothing"
            );
            let second = DockerDeployment::new(config);
            second.start().await.unwrap();
            let now = payload_images_of(&server).await;
            assert_eq!(
                now.len(),
                1,
                "the old image was pruned when the new one was built: {now:?}"
            );
            assert_ne!(now, old);
            // An image a container uses is kept, even once its binary is gone.
            std::fs::remove_file(&server).unwrap();
            let docker = engine().await.unwrap();
            uniagent_sandboxes::docker::prune_payload_images(&docker)
                .await
                .unwrap();
            assert_eq!(payload_images_of(&server).await, now, "in use");
            second.stop().await.unwrap();
            let removed = uniagent_sandboxes::docker::prune_payload_images(&docker)
                .await
                .unwrap();
            assert_eq!(removed, now);
            assert!(payload_images_of(&server).await.is_empty());
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_sweep_removes_the_legacy_isolated_network() {
    deadline(
        "the_stale_sweep_removes_the_legacy_isolated_network",
        DEFAULT,
        async {
            use std::collections::HashMap;
            if config_or_skip("legacy-network").await.is_none() {
                return;
            }
            let docker = engine().await.unwrap();
            // What earlier versions created for `network: none`.
            let created = docker
                .create_network(bollard::models::NetworkCreateRequest {
                    name: "uniagent-isolated".into(),
                    driver: Some("bridge".into()),
                    internal: Some(true),
                    labels: Some(HashMap::from([(
                        uniagent_sandboxes::docker::LABEL_MANAGED.to_owned(),
                        "true".to_owned(),
                    )])),
                    ..Default::default()
                })
                .await;
            // A network left by an earlier run is as good as a new one.
            if let Err(e) = &created {
                assert!(e.to_string().contains("already exists"), "{e}");
            }
            reap_stale(&docker).await.unwrap();
            let inspected = docker
                .inspect_network(
                    "uniagent-isolated",
                    None::<bollard::query_parameters::InspectNetworkOptions>,
                )
                .await;
            assert!(inspected.is_err(), "still there: {inspected:?}");
        },
    )
    .await;
}
