//! Fault injection: the Docker daemon restarts while a sandbox runs a command.
//!
//! The command ends with a typed sandbox error (no hang, no panic), the dead sandbox stops
//! cleanly, a new sandbox starts once the daemon is back, and no container of the run is left.
//!
//! Restarting the daemon disturbs everything else on the machine that uses it, so the test runs
//! only when `UNIAGENT_FAULT_DOCKER_RESTART=1` (`scripts/test` sets it for this binary alone,
//! after the rest of the suite) and a `dockerd` runs in this machine's process namespace, which
//! the test stops and starts again (`/usr/sbin/dockerd`, as root).

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_common;

use std::process::Command;
use std::time::{Duration, Instant};

use docker_common::{config_or_skip, containers_of};
use uniagent_core::{Deployment, DeploymentExt, Error};
use uniagent_sandboxes::docker::daemon_reachable;
use uniagent_sandboxes::DockerDeployment;

/// Stops the running `dockerd` (SIGTERM, as an init system does), starts it again detached
/// (its output appended to `/var/log/dockerd.log`), and waits until it answers.
async fn restart_daemon() {
    const RESTART: &str = "pid=$(pgrep -xo dockerd) || exit 3; kill -TERM \"$pid\" || exit 4; \
        while kill -0 \"$pid\" 2>/dev/null; do sleep 0.1; done; \
        setsid /usr/sbin/dockerd >>/var/log/dockerd.log 2>&1 </dev/null &";
    let status = Command::new("sh")
        .args(["-c", RESTART])
        .status()
        .expect("running sh");
    assert!(status.success(), "restarting dockerd failed: {status}");
    let clock = Instant::now();
    while daemon_reachable().await.is_err() {
        assert!(
            clock.elapsed() < Duration::from_secs(90),
            "the Docker daemon did not come back within 90 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_restart_mid_command_is_a_typed_error_and_the_next_sandbox_starts() {
    if std::env::var("UNIAGENT_FAULT_DOCKER_RESTART").as_deref() != Ok("1") {
        eprintln!("SKIPPED docker restart: set UNIAGENT_FAULT_DOCKER_RESTART=1 to run it");
        return;
    }
    let Some(config) = config_or_skip("restart").await else {
        return;
    };
    if !Command::new("pgrep")
        .args(["-x", "dockerd"])
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("SKIPPED docker restart: no dockerd process to restart on this machine");
        return;
    }
    let run = config.run_id.clone().unwrap();
    let sandbox = std::sync::Arc::new(DockerDeployment::new(config.clone()));
    sandbox.start().await.unwrap();
    assert_eq!(
        sandbox
            .sh("echo up", Duration::from_secs(10))
            .await
            .unwrap()
            .stdout,
        "up\n"
    );

    let running = {
        let sandbox = sandbox.clone();
        tokio::spawn(async move {
            let clock = Instant::now();
            (
                sandbox
                    .sh("sleep 60; echo late", Duration::from_secs(90))
                    .await,
                clock.elapsed(),
            )
        })
    };
    // Let the command start, then restart the daemon under it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    restart_daemon().await;

    let (result, took) = running.await.expect("the command's task must not panic");
    let err = result.expect_err("the sandbox died with the daemon's restart");
    eprintln!("the command ended after {took:?}: {err}");
    assert!(
        matches!(err, Error::Sandbox { .. } | Error::Timeout { .. }),
        "a typed sandbox error, got: {err:?}"
    );
    assert!(
        took < Duration::from_secs(60),
        "the error came when the command would have ended anyway ({took:?}): {err}"
    );
    // Later calls fail the same way, and stopping the dead sandbox works.
    assert!(sandbox
        .sh("echo again", Duration::from_secs(10))
        .await
        .is_err());
    sandbox.stop().await.unwrap();

    // The daemon is back: a new sandbox starts and works.
    let next = DockerDeployment::new(config);
    next.start().await.unwrap();
    assert_eq!(
        next.sh("echo next", Duration::from_secs(10))
            .await
            .unwrap()
            .stdout,
        "next\n"
    );
    next.stop().await.unwrap();
    assert_eq!(
        containers_of(&run).await,
        0,
        "no container of the run is left"
    );
}
