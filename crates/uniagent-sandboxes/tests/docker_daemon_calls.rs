//! The Docker API requests one `network: none` sandbox costs over its lifetime (start, a
//! workload, stop), counted by `uniagent_sandboxes::docker::daemon_calls`. One test in its own binary:
//! the counter is process-wide. The figures are printed (run with `--nocapture`).

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

mod docker_common;

use std::time::Duration;

use docker_common::config_or_skip;
use docker_common::deadline::{deadline, LONG};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uniagent_core::{Deployment, DeploymentExt};
use uniagent_sandboxes::docker::daemon_calls;
use uniagent_sandboxes::{DockerConfig, DockerDeployment};

/// Tool calls (or raw requests) per workload, and how many run at once.
const CALLS: usize = 48;
const CONCURRENCY: usize = 8;

/// One raw HTTP request on a connection of its own (`connection: close`).
async fn one_shot_request(address: &str) {
    let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
    client
        .write_all(b"GET /is_alive HTTP/1.1\r\nhost: sandbox\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 "), "{answer:?}");
}

/// Daemon calls of start + `work` + stop.
async fn lifetime_calls<F, Fut>(config: &DockerConfig, work: F) -> u64
where
    F: FnOnce(DockerDeployment) -> Fut,
    Fut: std::future::Future<Output = DockerDeployment>,
{
    let before = daemon_calls();
    let sandbox = DockerDeployment::new(config.clone());
    sandbox.start().await.unwrap();
    let sandbox = work(sandbox).await;
    sandbox.stop().await.unwrap();
    daemon_calls() - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_lifetime_costs_a_bounded_number_of_daemon_calls() {
    deadline(
        "a_sandbox_lifetime_costs_a_bounded_number_of_daemon_calls",
        LONG,
        async {
            let Some(config) = config_or_skip("daemon-calls").await else {
                return;
            };
            // Warm-up: the once-per-process sweep and the payload image are not per sandbox.
            let idle = lifetime_calls(&config, |s| async { s }).await;
            let idle = idle.min(lifetime_calls(&config, |s| async { s }).await);
            // Tool calls through the deployment's own client (keep-alive pool), 8 at once, with
            // a pause longer than the pool's idle timeout in the middle (reconnects).
            let tools = lifetime_calls(&config, |sandbox| async move {
                for round in 0..2 {
                    futures::stream::iter(0..CALLS / 2)
                        .map(|i| {
                            let sandbox = &sandbox;
                            async move {
                                let out = sandbox
                                    .sh(&format!("echo {i}"), Duration::from_secs(30))
                                    .await
                                    .unwrap();
                                assert_eq!(out.stdout.trim(), i.to_string());
                            }
                        })
                        .buffer_unordered(CONCURRENCY)
                        .collect::<Vec<()>>()
                        .await;
                    if round == 0 {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                }
                sandbox
            })
            .await;
            // Clients without keep-alive: one connection per request, 8 at once.
            let one_shot = lifetime_calls(&config, |sandbox| async move {
                let url = sandbox.info().await.unwrap().url;
                let address = url.trim_start_matches("http://").to_owned();
                futures::stream::iter(0..CALLS)
                    .map(|_| one_shot_request(&address))
                    .buffer_unordered(CONCURRENCY)
                    .collect::<Vec<()>>()
                    .await;
                sandbox
            })
            .await;
            println!(
                "daemon calls per sandbox lifetime: idle (start, stop) {idle}; {CALLS} tool calls \
                 through the client's pool, {CONCURRENCY} at once {tools}; {CALLS} requests with \
                 a connection each, {CONCURRENCY} at once {one_shot}"
            );
            // The relay's cost does not grow with connections: a small constant over idle.
            assert!(
                tools <= idle + 8,
                "{tools} calls for tool calls, {idle} idle"
            );
            assert!(
                one_shot <= idle + 8,
                "{one_shot} calls for one-shot requests, {idle} idle"
            );
        },
    )
    .await;
}
