//! The docker backend's limits are real: a memory hog is OOM-killed and reported as a sandbox
//! error, a fork bomb is held by the pids limit, and the network is unreachable by default.

#![cfg(feature = "docker")]

mod docker_common;

use docker_common::config_or_skip;
use uniagent_core::{Deployment, DeploymentExt, Error};
use uniagent_envs::DockerDeployment;

const HOG: &str = "python3 -c 'b = []\nwhile True: b.append(bytearray(8 << 20))'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_oom_killed_and_reported_as_a_sandbox_error() {
    let Some(mut config) = config_or_skip("oom").await else {
        return;
    };
    config.memory_bytes = Some(96 << 20);
    let sandbox = DockerDeployment::new(config);
    sandbox.start().await.unwrap();
    let err = sandbox.sh(HOG, 60.0).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Sandbox {
                retryable: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("out of memory"), "{err}");
    assert!(
        err.to_string().contains(&(96u64 << 20).to_string()),
        "{err}"
    );
    // The sandbox survives the hog, and a plain SIGKILL is not mistaken for an OOM kill.
    let out = sandbox
        .sh("echo alive; sh -c 'kill -9 $$'", 10.0)
        .await
        .unwrap();
    assert_eq!((out.stdout.as_str(), out.exit_code), ("alive\n", Some(137)));
    // In a session too.
    sandbox
        .create_session(uniagent_core::sandbox::CreateSessionRequest::new("s"))
        .await
        .unwrap();
    let err = sandbox.bash("s", HOG, 60.0).await.unwrap_err();
    assert!(err.to_string().contains("out of memory"), "{err}");
    assert_eq!(
        sandbox
            .bash("s", "echo ok", 10.0)
            .await
            .unwrap()
            .output
            .trim(),
        "ok"
    );
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_held_by_the_pids_limit() {
    let Some(mut config) = config_or_skip("pids").await else {
        return;
    };
    config.pids_limit = Some(48);
    let sandbox = DockerDeployment::new(config);
    sandbox.start().await.unwrap();
    // Every process forks until fork fails; the first to fail reports how far the bomb got,
    // then the whole group is killed.
    let bomb = r#"python3 - <<'EOF'
import os, signal, sys, time
os.setpgrp()
forked = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        max_ = open('/sys/fs/cgroup/pids/pids.max').read().strip()
        cur = open('/sys/fs/cgroup/pids/pids.current').read().strip()
        print(f"errno={e.errno} max={max_} current={cur}", flush=True)
        os.killpg(0, signal.SIGKILL)
    if pid == 0:
        forked = 0
        continue
    forked += 1
EOF"#;
    let out = sandbox.sh(bomb, 60.0).await.unwrap();
    assert!(
        out.stdout.starts_with("errno=11 max=48 current="),
        "{out:?}"
    );
    let current: u32 = out
        .stdout
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(current <= 48, "{out:?}");
    // The server and new processes still work after the bomb is gone.
    let after = sandbox.sh("echo survived", 10.0).await.unwrap();
    assert_eq!(after.stdout, "survived\n");
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_unreachable_by_default() {
    let Some(config) = config_or_skip("network").await else {
        return;
    };
    let a = DockerDeployment::new(config.clone());
    let b = DockerDeployment::new(config);
    assert!(a.capabilities().network_isolation);
    let (ra, rb) = tokio::join!(a.start(), b.start());
    ra.unwrap();
    rb.unwrap();
    let b_url = b.info().await.unwrap().url;
    let b_addr = b_url.trim_start_matches("http://").replace(':', "', ");
    let probe = format!(
        r#"python3 - <<'EOF'
import socket
for target in [('1.1.1.1', 80), ('8.8.8.8', 53), ('{b_addr}), ('127.0.0.1', 8000)]:
    try:
        socket.create_connection(target, timeout=2).close()
        print(target, 'connected')
    except OSError as e:
        print(target, type(e).__name__, e.errno)
try:
    socket.getaddrinfo('deb.debian.org', 80)
    print('dns resolved')
except OSError as e:
    print('dns failed')
EOF"#
    );
    let out = a.sh(&probe, 30.0).await.unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{out:?}");
    // The probe does detect a connection: the sandbox's own server on loopback answers.
    assert_eq!(lines[3], "('127.0.0.1', 8000) connected", "{out:?}");
    // Nothing answers: the internal network drops every packet leaving its subnet (a timeout),
    // or the kernel finds no route (errno 101 ENETUNREACH / 113 EHOSTUNREACH).
    for line in &lines[..3] {
        assert!(
            line.ends_with("TimeoutError None")
                || line.ends_with("OSError 101")
                || line.ends_with("OSError 113"),
            "unexpectedly reachable: {out:?}"
        );
    }
    assert_eq!(lines[4], "dns failed", "{out:?}");
    // The host reaches both servers.
    assert_eq!(b.sh("echo b", 10.0).await.unwrap().stdout, "b\n");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
