//! Lifecycle of the docker backend: commands run, containers are removed on stop, drop, panic
//! and lifetime expiry, and a killed process's containers are reaped.

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

mod docker_common;

use docker_common::deadline::{deadline, DEFAULT};

use std::time::Duration;

use docker_common::{config_or_skip, containers_of};
use uniagent_core::sandbox::*;
use uniagent_core::{Deployment, DeploymentExt, Error};
use uniagent_sandboxes::DockerDeployment;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_sessions_and_files_run_in_the_container_and_stop_removes_it() {
    deadline(
        "commands_sessions_and_files_run_in_the_container_and_stop_removes_it",
        DEFAULT,
        async {
            let Some(config) = config_or_skip("basic").await else {
                return;
            };
            let run = config.run_id.clone().unwrap();
            let sandbox = DockerDeployment::new(config);
            assert!(sandbox.info().await.is_none());
            assert!(
                sandbox.sh("true", Duration::from_secs(5)).await.is_err(),
                "not started yet"
            );
            sandbox.start().await.unwrap();
            let info = sandbox.info().await.unwrap();
            assert_eq!(info.run_id, run);
            assert_eq!(containers_of(&run).await, 1);
            let out = sandbox
                .sh(
                    "echo hi; cat /etc/debian_version >/dev/null; pwd",
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
            assert_eq!(out.stdout, "hi\n/work\n");
            assert_eq!(out.exit_code, Some(0));
            assert_eq!(
                sandbox
                    .sh("exit 3", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .exit_code,
                Some(3)
            );
            sandbox
                .create_session(CreateSessionRequest::new("default"))
                .await
                .unwrap();
            sandbox
                .bash("default", "export X=41; cd /tmp", Duration::from_secs(10))
                .await
                .unwrap();
            let obs = sandbox
                .bash("default", "echo $((X+1)) $PWD", Duration::from_secs(10))
                .await
                .unwrap();
            assert_eq!(obs.output.trim(), "42 /tmp");
            sandbox
                .write_text("/work/a/b.txt", "content")
                .await
                .unwrap();
            assert_eq!(sandbox.read_text("/work/a/b.txt").await.unwrap(), "content");
            let which = sandbox
                .sh(
                    "command -v uniagent-sandbox; id -u",
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
            assert_eq!(which.stdout, "/opt/uniagent/bin/uniagent-sandbox\n0\n");
            // All capabilities are dropped: the effective set is empty.
            let caps = sandbox
                .sh("grep CapEff /proc/self/status", Duration::from_secs(10))
                .await
                .unwrap();
            assert_eq!(caps.stdout.trim(), "CapEff:\t0000000000000000");
            sandbox.stop().await.unwrap();
            sandbox.stop().await.unwrap();
            assert_eq!(containers_of(&run).await, 0, "stop removes the container");
            assert!(
                sandbox.sh("true", Duration::from_secs(5)).await.is_err(),
                "stopped"
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_and_panic_remove_the_container() {
    deadline("drop_and_panic_remove_the_container", DEFAULT, async {
        let Some(config) = config_or_skip("drop").await else {
            return;
        };
        let run = config.run_id.clone().unwrap();
        let sandbox = DockerDeployment::new(config.clone());
        sandbox.start().await.unwrap();
        assert_eq!(containers_of(&run).await, 1);
        drop(sandbox);
        assert_eq!(containers_of(&run).await, 0, "drop removes the container");

        let task = tokio::spawn(async move {
            let sandbox = DockerDeployment::new(config);
            sandbox.start().await.unwrap();
            let out = sandbox
                .sh("echo up", Duration::from_secs(10))
                .await
                .unwrap();
            assert_eq!(out.stdout, "up\n");
            panic!("rollout panicked while holding a sandbox");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(
            containers_of(&run).await,
            0,
            "a panic removes the container"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_start_leaves_nothing() {
    deadline("a_cancelled_start_leaves_nothing", DEFAULT, async {
        let Some(config) = config_or_skip("cancel").await else {
            return;
        };
        let run = config.run_id.clone().unwrap();
        for after_ms in [50, 300, 800] {
            let sandbox = DockerDeployment::new(config.clone());
            let _ = tokio::time::timeout(Duration::from_millis(after_ms), sandbox.start()).await;
            drop(sandbox);
        }
        // A create request that was in flight when its future was dropped may land afterwards.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let docker = uniagent_sandboxes::docker::engine().await.unwrap();
        uniagent_sandboxes::docker::reap_run(&docker, &run)
            .await
            .unwrap();
        assert_eq!(containers_of(&run).await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifetime_limit_is_enforced() {
    deadline("the_lifetime_limit_is_enforced", DEFAULT, async {
        let Some(mut config) = config_or_skip("lifetime").await else {
            return;
        };
        config.lifetime = Some(Duration::from_secs(3));
        let run = config.run_id.clone().unwrap();
        let sandbox = DockerDeployment::new(config);
        sandbox.start().await.unwrap();
        let err = sandbox
            .sh("sleep 30", Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Sandbox { .. }), "{err}");
        assert!(err.to_string().contains("lifetime"), "{err}");
        assert_eq!(
            containers_of(&run).await,
            0,
            "the expired container is removed"
        );
        sandbox.stop().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_root_keeps_the_work_dir_writable() {
    deadline(
        "a_read_only_root_keeps_the_work_dir_writable",
        DEFAULT,
        async {
            let Some(mut config) = config_or_skip("readonly").await else {
                return;
            };
            config.read_only_root = true;
            let sandbox = DockerDeployment::new(config);
            sandbox.start().await.unwrap();
            let out = sandbox
        .sh(
            "touch /etc/x 2>&1; echo w > /work/f && cat /work/f; echo t > /tmp/f && cat /tmp/f",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
            assert!(out.stdout.contains("Read-only file system"), "{out:?}");
            assert!(out.stdout.ends_with("w\nt\n"), "{out:?}");
            sandbox.stop().await.unwrap();
        },
    )
    .await;
}

/// The relay's multiplexer processes (`--relay-mux`) running in the sandbox, read from `/proc`.
async fn relay_processes(sandbox: &DockerDeployment) -> usize {
    let out = sandbox
        .sh(
            "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done \
             | grep -c '^/opt/uniagent/bin/uniagent-sandbox --relay-mux' || true",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    out.stdout.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_connections_share_one_multiplexer_and_the_relay_ends_with_the_deployment() {
    deadline(
        "relay_connections_share_one_multiplexer_and_the_relay_ends_with_the_deployment",
        DEFAULT,
        async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let Some(config) = config_or_skip("relay").await else {
                return;
            };
            let sandbox = DockerDeployment::new(config);
            sandbox.start().await.unwrap();
            let url = sandbox.info().await.unwrap().url;
            let address = url.trim_start_matches("http://").to_owned();
            let baseline = relay_processes(&sandbox).await;
            // Clients that each send one request (binary-safe both ways: a raw HTTP exchange), read the
            // answer, and hang up.
            for _ in 0..5 {
                let mut client = tokio::net::TcpStream::connect(&address).await.unwrap();
                client
                    .write_all(
                        b"GET /is_alive HTTP/1.1\r\nhost: sandbox\r\nconnection: close\r\n\r\n",
                    )
                    .await
                    .unwrap();
                let mut answer = Vec::new();
                client.read_to_end(&mut answer).await.unwrap();
                let answer = String::from_utf8_lossy(&answer);
                assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
            }
            // Clients that stay connected share the one multiplexer (the count is real: the
            // `sh` calls that count ride on it too)...
            let mut idle = Vec::new();
            for _ in 0..3 {
                idle.push(tokio::net::TcpStream::connect(&address).await.unwrap());
            }
            assert_eq!(baseline, 1, "one multiplexer before");
            assert_eq!(relay_processes(&sandbox).await, 1, "one multiplexer after");
            // ...and hang up without a word: the multiplexer stays for the next connections.
            drop(idle);
            assert_eq!(relay_processes(&sandbox).await, 1);
            let stats = sandbox.relay_stats().await.unwrap();
            assert_eq!(stats.mux_execs, 1, "{stats:?}");
            assert!(stats.connections >= 8, "{stats:?}");
            sandbox.stop().await.unwrap();
            // The listener is gone with the deployment.
            let mut refused = false;
            for _ in 0..100 {
                if tokio::net::TcpStream::connect(&address).await.is_err() {
                    refused = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(refused, "the relay still listens on {address} after stop");
        },
    )
    .await;
}

/// The payload images committed on top of `base_id`.
async fn payload_images_of(base_id: &str) -> Vec<String> {
    let docker = uniagent_sandboxes::docker::engine().await.unwrap();
    let images = docker
        .list_images(Some(bollard::query_parameters::ListImagesOptions {
            filters: Some(std::collections::HashMap::from([(
                "reference".to_owned(),
                vec![format!("{}:*", uniagent_sandboxes::docker::PAYLOAD_REPO)],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap();
    images
        .into_iter()
        .filter(|i| i.parent_id == base_id)
        .map(|i| i.id)
        .collect()
}

/// The first start of an image in a process uploads the payload into its own container (an
/// image started once, as each SWE-bench instance's when grading, never pays for a commit);
/// the second commits the payload image. A sandbox without a lifetime started from that image
/// has no deadline: the image carries its build container's, which would make the sandbox look
/// stale to a sweep ten minutes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_of_an_image_uploads_the_payload_and_the_second_commits_it() {
    deadline(
        "the_first_start_of_an_image_uploads_the_payload_and_the_second_commits_it",
        DEFAULT,
        async {
            let Some(mut config) = config_or_skip("payload").await else {
                return;
            };
            // An image no other test starts: its own id, from a label.
            let tag = format!("uniagent-test-payload:{:x}", fastrand::u64(..));
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(
                dir.path().join("Dockerfile"),
                format!(
                    "FROM {}\nLABEL dev.uniagent.test-image={tag}\n",
                    config.image
                ),
            )
            .unwrap();
            let built = std::process::Command::new("docker")
                .args(["build", "-q", "-t", &tag])
                .arg(dir.path())
                .output()
                .unwrap();
            assert!(built.status.success(), "{built:?}");
            let docker = uniagent_sandboxes::docker::engine().await.unwrap();
            let base_id = docker.inspect_image(&tag).await.unwrap().id.unwrap();
            config.image = tag.clone();

            let first = DockerDeployment::new(config.clone());
            first.start().await.unwrap();
            let out = first.sh("echo ok", Duration::from_secs(10)).await.unwrap();
            assert_eq!(out.stdout, "ok\n");
            assert_eq!(
                payload_images_of(&base_id).await.len(),
                0,
                "committed at once"
            );
            first.stop().await.unwrap();

            config.lifetime = None;
            let run = config.run_id.clone().unwrap();
            let second = DockerDeployment::new(config.clone());
            second.start().await.unwrap();
            let out = second.sh("echo ok", Duration::from_secs(10)).await.unwrap();
            assert_eq!(out.stdout, "ok\n");
            let committed = payload_images_of(&base_id).await;
            assert_eq!(committed.len(), 1, "the second start commits");
            let managed = uniagent_sandboxes::docker::list_managed(&docker, Some(&run))
                .await
                .unwrap();
            assert_eq!(managed.len(), 1);
            assert_eq!(managed[0].deadline, None, "{:?}", managed[0]);
            second.stop().await.unwrap();

            for image in committed.iter().chain([&tag]) {
                let _ = std::process::Command::new("docker")
                    .args(["rmi", "-f", image])
                    .output();
            }
        },
    )
    .await;
}
