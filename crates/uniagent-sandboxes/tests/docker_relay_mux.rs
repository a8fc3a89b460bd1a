//! The relay of `network: none` sandboxes: many connections over one multiplexer exec, a
//! stalled client beside working ones, and a killed multiplexer that the next connection
//! replaces.

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

mod docker_common;

use std::time::Duration;

use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use docker_common::config_or_skip;
use docker_common::deadline::{deadline, DEFAULT};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uniagent_core::{Deployment, DeploymentExt};
use uniagent_sandboxes::docker::engine;
use uniagent_sandboxes::DockerDeployment;

/// Lists the pids of the multiplexer processes in the container.
const FIND_MUX: &str = "for f in /proc/[0-9]*/cmdline; do \
     if tr '\\0' ' ' < $f 2>/dev/null | grep -q '^/opt/uniagent/bin/uniagent-sandbox --relay-mux'; \
     then p=${f#/proc/}; echo ${p%/cmdline}; fi; done";

/// Runs `script` in the container through its own exec (not through the relay) and returns
/// its output.
async fn exec_in(container: &str, script: &str) -> String {
    let docker = engine().await.unwrap();
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let StartExecResults::Attached { mut output, .. } = docker
        .start_exec(&exec.id, None::<StartExecOptions>)
        .await
        .unwrap()
    else {
        panic!("the exec started detached");
    };
    let mut text = String::new();
    let collect = async {
        while let Some(Ok(chunk)) = output.next().await {
            text.push_str(&chunk.to_string());
        }
    };
    tokio::time::timeout(Duration::from_secs(30), collect)
        .await
        .expect("the exec did not finish");
    text
}

/// One raw request on a connection of its own; the answer's status line.
async fn one_shot(address: &str) -> String {
    let mut client = tokio::net::TcpStream::connect(address).await.unwrap();
    client
        .write_all(b"GET /is_alive HTTP/1.1\r\nhost: sandbox\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn address_of(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_connections_share_one_exec() {
    deadline(
        "many_concurrent_connections_share_one_exec",
        DEFAULT,
        async {
            let Some(config) = config_or_skip("mux-many").await else {
                return;
            };
            let sandbox = DockerDeployment::new(config);
            sandbox.start().await.unwrap();
            let info = sandbox.info().await.unwrap();
            let address = address_of(&info.url);
            // 64 connections at once, each its own, beside tool calls over the client's pool.
            let raw = futures::stream::iter(0..64)
                .map(|_| one_shot(&address))
                .buffer_unordered(64)
                .collect::<Vec<String>>();
            let tools = futures::stream::iter(0..16)
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
                .buffer_unordered(8)
                .collect::<Vec<()>>();
            let (answers, _) = tokio::join!(raw, tools);
            for answer in &answers {
                assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
            }
            let stats = sandbox.relay_stats().await.unwrap();
            assert!(stats.connections >= 64, "{stats:?}");
            assert_eq!(stats.mux_execs, 1, "{stats:?}");
            // One multiplexer process in the container, however many connections came.
            let pids = exec_in(&info.container_id, FIND_MUX).await;
            assert_eq!(pids.split_whitespace().count(), 1, "{pids}");
            sandbox.stop().await.unwrap();
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_does_not_block_another() {
    deadline("a_stalled_client_does_not_block_another", DEFAULT, async {
        let Some(config) = config_or_skip("mux-stalled").await else {
            return;
        };
        let sandbox = DockerDeployment::new(config);
        sandbox.start().await.unwrap();
        let address = address_of(&sandbox.info().await.unwrap().url);
        // A client that pipelines thousands of requests and never reads an answer: the server's
        // answers fill its window, then the server stops reading its requests.
        let mut stalled = tokio::net::TcpStream::connect(&address).await.unwrap();
        let request = b"GET /is_alive HTTP/1.1\r\nhost: sandbox\r\n\r\n";
        let flood = request.repeat(400_000);
        let writer = tokio::spawn(async move {
            // Stops when the back-pressure reaches it; the socket stays open, unread.
            let _ = tokio::time::timeout(Duration::from_secs(60), stalled.write_all(&flood)).await;
            stalled
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !writer.is_finished(),
            "the flood was absorbed: nothing stalled"
        );
        // Others still get through, promptly, over the same exec.
        for i in 0..5 {
            let out = tokio::time::timeout(
                Duration::from_secs(20),
                sandbox.sh(&format!("echo {i}"), Duration::from_secs(10)),
            )
            .await
            .expect("a tool call blocked behind a stalled client")
            .unwrap();
            assert_eq!(out.stdout.trim(), i.to_string());
            let answer = tokio::time::timeout(Duration::from_secs(20), one_shot(&address))
                .await
                .expect("a connection blocked behind a stalled client");
            assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
        }
        assert_eq!(sandbox.relay_stats().await.unwrap().mux_execs, 1);
        writer.abort();
        sandbox.stop().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_multiplexer_is_replaced_by_the_next_connection() {
    deadline(
        "a_killed_multiplexer_is_replaced_by_the_next_connection",
        DEFAULT,
        async {
            let Some(config) = config_or_skip("mux-killed").await else {
                return;
            };
            let sandbox = DockerDeployment::new(config);
            sandbox.start().await.unwrap();
            let info = sandbox.info().await.unwrap();
            assert_eq!(
                sandbox
                    .sh("echo one", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "one\n"
            );
            // A connection held open on the multiplexer that is about to die.
            let address = address_of(&info.url);
            let mut held = tokio::net::TcpStream::connect(&address).await.unwrap();
            held.write_all(b"GET /is_alive HTTP/1.1\r\nhost: sandbox\r\n\r\n")
                .await
                .unwrap();
            let mut first = [0u8; 12];
            held.read_exact(&mut first).await.unwrap();
            let pids = exec_in(&info.container_id, FIND_MUX).await;
            assert_eq!(pids.split_whitespace().count(), 1, "{pids}");
            exec_in(&info.container_id, &format!("kill -9 {}", pids.trim())).await;
            // The held connection fails promptly (the rest of its answer, then its end).
            let mut rest = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), held.read_to_end(&mut rest))
                .await
                .expect("a connection on a killed multiplexer hangs")
                .ok();
            // The next connection starts a new multiplexer and works. The client's pooled
            // keep-alive connection also went through the dead multiplexer, and a request may
            // still be written to it before its close is seen: `is_alive` probes (one attempt
            // each; a dead connection answers `false`) use it up, so the command below goes out
            // on a new connection. A command that meets a dead connection is a typed sandbox
            // error, never retried: it may have run.
            let probing = tokio::time::Instant::now();
            while !sandbox.is_alive().await.unwrap().is_alive {
                assert!(
                    probing.elapsed() < Duration::from_secs(10),
                    "no new multiplexer answered within 10 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(
                sandbox
                    .sh("echo two", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .stdout,
                "two\n"
            );
            assert_eq!(sandbox.relay_stats().await.unwrap().mux_execs, 2);
            let pids = exec_in(&info.container_id, FIND_MUX).await;
            assert_eq!(pids.split_whitespace().count(), 1, "{pids}");
            sandbox.stop().await.unwrap();
        },
    )
    .await;
}
