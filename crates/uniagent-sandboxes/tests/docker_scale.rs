//! 64 sandboxes at once: each runs commands, none clash, none leak.

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

mod docker_common;

use docker_common::deadline::{deadline, LONG};

use std::sync::Arc;
use std::time::Duration;

use docker_common::{config_or_skip, containers_of};
use futures::future::join_all;
use uniagent_core::sandbox::CreateSessionRequest;
use uniagent_core::{Deployment, DeploymentExt};
use uniagent_sandboxes::{DockerDeployment, NetworkMode};

const SANDBOXES: usize = 64;

async fn run_many(network: NetworkMode, test: &str) {
    let Some(mut config) = config_or_skip(test).await else {
        return;
    };
    config.memory_bytes = Some(64 << 20);
    config.cpus = Some(0.25);
    config.network = network;
    let run = config.run_id.clone().unwrap();
    let sandboxes: Vec<Arc<DockerDeployment>> = (0..SANDBOXES)
        .map(|_| Arc::new(DockerDeployment::new(config.clone())))
        .collect();
    let results = join_all(sandboxes.iter().enumerate().map(|(i, s)| {
        let s = s.clone();
        async move {
            s.start().await?;
            let out = s
                .sh(&format!("echo {i} $(hostname)"), Duration::from_secs(60))
                .await?;
            s.create_session(CreateSessionRequest::new("default"))
                .await?;
            let obs = s
                .bash(
                    "default",
                    &format!("X={i}; echo $((X*2))"),
                    Duration::from_secs(60),
                )
                .await?;
            Ok::<_, uniagent_core::Error>((out.stdout, obs.output, s.info().await))
        }
    }))
    .await;
    assert_eq!(containers_of(&run).await, SANDBOXES);
    let mut urls = std::collections::HashSet::new();
    let mut hosts = std::collections::HashSet::new();
    for (i, result) in results.into_iter().enumerate() {
        let (stdout, output, info) = result.unwrap_or_else(|e| panic!("sandbox {i}: {e}"));
        let mut words = stdout.split_whitespace();
        assert_eq!(words.next(), Some(i.to_string().as_str()));
        hosts.insert(words.next().unwrap().to_owned());
        assert_eq!(output.trim(), (i * 2).to_string());
        urls.insert(info.unwrap().url);
    }
    assert_eq!(urls.len(), SANDBOXES, "every sandbox has its own endpoint");
    assert_eq!(
        hosts.len(),
        SANDBOXES,
        "every command ran in its own container"
    );
    join_all(sandboxes.iter().map(|s| s.stop()))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(containers_of(&run).await, 0, "nothing leaks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_isolated_sandboxes_run_commands_at_once() {
    deadline(
        "sixty_four_isolated_sandboxes_run_commands_at_once",
        LONG,
        async {
            run_many(NetworkMode::None, "scale").await;
        },
    )
    .await;
}
