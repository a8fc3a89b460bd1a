//! Lifecycle of the docker backend: commands run, containers are removed on stop, drop, panic
//! and lifetime expiry, and a killed process's containers are reaped.

#![cfg(feature = "docker")]

mod docker_common;

use std::time::Duration;

use docker_common::{config_or_skip, containers_of};
use uniagent_core::sandbox::*;
use uniagent_core::{Deployment, DeploymentExt, Error};
use uniagent_envs::DockerDeployment;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_sessions_and_files_run_in_the_container_and_stop_removes_it() {
    let Some(config) = config_or_skip("basic").await else {
        return;
    };
    let run = config.run_id.clone().unwrap();
    let sandbox = DockerDeployment::new(config);
    assert!(sandbox.info().await.is_none());
    assert!(sandbox.sh("true", 5.0).await.is_err(), "not started yet");
    sandbox.start().await.unwrap();
    let info = sandbox.info().await.unwrap();
    assert_eq!(info.run_id, run);
    assert_eq!(containers_of(&run).await, 1);
    let out = sandbox
        .sh("echo hi; cat /etc/debian_version >/dev/null; pwd", 10.0)
        .await
        .unwrap();
    assert_eq!(out.stdout, "hi\n/work\n");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(sandbox.sh("exit 3", 10.0).await.unwrap().exit_code, Some(3));
    sandbox
        .create_session(CreateSessionRequest::new("default"))
        .await
        .unwrap();
    sandbox
        .bash("default", "export X=41; cd /tmp", 10.0)
        .await
        .unwrap();
    let obs = sandbox
        .bash("default", "echo $((X+1)) $PWD", 10.0)
        .await
        .unwrap();
    assert_eq!(obs.output.trim(), "42 /tmp");
    sandbox
        .write_text("/work/a/b.txt", "content")
        .await
        .unwrap();
    assert_eq!(sandbox.read_text("/work/a/b.txt").await.unwrap(), "content");
    let which = sandbox
        .sh("command -v uniagent-sandbox; id -u", 10.0)
        .await
        .unwrap();
    assert_eq!(which.stdout, "/opt/uniagent/bin/uniagent-sandbox\n0\n");
    // All capabilities are dropped: the effective set is empty.
    let caps = sandbox
        .sh("grep CapEff /proc/self/status", 10.0)
        .await
        .unwrap();
    assert_eq!(caps.stdout.trim(), "CapEff:\t0000000000000000");
    sandbox.stop().await.unwrap();
    sandbox.stop().await.unwrap();
    assert_eq!(containers_of(&run).await, 0, "stop removes the container");
    assert!(sandbox.sh("true", 5.0).await.is_err(), "stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_and_panic_remove_the_container() {
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
        let out = sandbox.sh("echo up", 10.0).await.unwrap();
        assert_eq!(out.stdout, "up\n");
        panic!("rollout panicked while holding a sandbox");
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(
        containers_of(&run).await,
        0,
        "a panic removes the container"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_start_leaves_nothing() {
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
    let docker = uniagent_envs::docker::engine().await.unwrap();
    uniagent_envs::docker::reap_run(&docker, &run)
        .await
        .unwrap();
    assert_eq!(containers_of(&run).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifetime_limit_is_enforced() {
    let Some(mut config) = config_or_skip("lifetime").await else {
        return;
    };
    config.lifetime = Some(Duration::from_secs(3));
    let run = config.run_id.clone().unwrap();
    let sandbox = DockerDeployment::new(config);
    sandbox.start().await.unwrap();
    let err = sandbox.sh("sleep 30", 60.0).await.unwrap_err();
    assert!(matches!(err, Error::Sandbox { .. }), "{err}");
    assert!(err.to_string().contains("lifetime"), "{err}");
    assert_eq!(
        containers_of(&run).await,
        0,
        "the expired container is removed"
    );
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_root_keeps_the_work_dir_writable() {
    let Some(mut config) = config_or_skip("readonly").await else {
        return;
    };
    config.read_only_root = true;
    let sandbox = DockerDeployment::new(config);
    sandbox.start().await.unwrap();
    let out = sandbox
        .sh(
            "touch /etc/x 2>&1; echo w > /work/f && cat /work/f; echo t > /tmp/f && cat /tmp/f",
            10.0,
        )
        .await
        .unwrap();
    assert!(out.stdout.contains("Read-only file system"), "{out:?}");
    assert!(out.stdout.ends_with("w\nt\n"), "{out:?}");
    sandbox.stop().await.unwrap();
}
