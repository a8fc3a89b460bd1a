//! The docker backend's limits are real: a memory hog is OOM-killed and reported as a sandbox
//! error, a fork bomb is held by the pids limit, and the network is unreachable by default.

#![cfg(feature = "docker")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

use std::time::Duration;

mod docker_common;

use docker_common::deadline::{deadline, DEFAULT};

use docker_common::config_or_skip;
use uniagent_core::{Deployment, DeploymentExt, Error};
use uniagent_sandboxes::DockerDeployment;

const HOG: &str = "python3 -c 'b = []\nwhile True: b.append(bytearray(8 << 20))'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_oom_killed_and_reported_as_a_sandbox_error() {
    deadline(
        "a_memory_hog_is_oom_killed_and_reported_as_a_sandbox_error",
        DEFAULT,
        async {
            let Some(mut config) = config_or_skip("oom").await else {
                return;
            };
            config.memory_bytes = Some(96 << 20);
            let sandbox = DockerDeployment::new(config);
            sandbox.start().await.unwrap();
            let err = sandbox.sh(HOG, Duration::from_secs(60)).await.unwrap_err();
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
                .sh("echo alive; sh -c 'kill -9 $$'", Duration::from_secs(10))
                .await
                .unwrap();
            assert_eq!((out.stdout.as_str(), out.exit_code), ("alive\n", Some(137)));
            // In a session too.
            sandbox
                .create_session(uniagent_core::sandbox::CreateSessionRequest::new("s"))
                .await
                .unwrap();
            let err = sandbox
                .bash("s", HOG, Duration::from_secs(60))
                .await
                .unwrap_err();
            assert!(err.to_string().contains("out of memory"), "{err}");
            assert_eq!(
                sandbox
                    .bash("s", "echo ok", Duration::from_secs(10))
                    .await
                    .unwrap()
                    .output
                    .trim(),
                "ok"
            );
            sandbox.stop().await.unwrap();
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_held_by_the_pids_limit() {
    deadline("a_fork_bomb_is_held_by_the_pids_limit", DEFAULT, async {
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
        let out = sandbox.sh(bomb, Duration::from_secs(60)).await.unwrap();
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
        let after = sandbox
            .sh("echo survived", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(after.stdout, "survived\n");
        sandbox.stop().await.unwrap();
    })
    .await;
}

/// Every IPv4 address of this host's interfaces (the `LOCAL` entries of `/proc/net/fib_trie`),
/// loopback and the Docker bridge's gateway included.
fn host_ipv4_addresses() -> Vec<String> {
    let trie = std::fs::read_to_string("/proc/net/fib_trie").unwrap();
    let lines: Vec<&str> = trie.lines().collect();
    let mut addresses: Vec<String> = lines
        .windows(2)
        .filter(|pair| pair[1].trim() == "/32 host LOCAL")
        .filter_map(|pair| pair[0].trim().strip_prefix("|-- "))
        .map(str::to_owned)
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses
}

/// The gateway of a container on Docker's default bridge: the host's address on that bridge.
async fn bridge_gateway(container: &str) -> String {
    let docker = uniagent_sandboxes::docker::engine().await.unwrap();
    let inspected = docker
        .inspect_container(
            container,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    inspected.network_settings.unwrap().networks.unwrap()["bridge"]
        .gateway
        .clone()
        .unwrap()
}

/// A probe run inside a sandbox: one line per target, `HOST PORT connected` or
/// `HOST PORT <error>`.
fn connect_probe(targets: &[(String, u16)]) -> String {
    let list = targets
        .iter()
        .map(|(h, p)| format!("('{h}', {p})"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"python3 - <<'EOF'
import socket
for host, port in [{list}]:
    try:
        socket.create_connection((host, port), timeout=2).close()
        print(host, port, 'connected')
    except OSError as e:
        print(host, port, type(e).__name__, e.errno)
EOF"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_unreachable_by_default() {
    deadline("the_network_is_unreachable_by_default", DEFAULT, async {
        let Some(config) = config_or_skip("network").await else {
            return;
        };
        // A host service listening on every interface, as careless services do.
        let service = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = service.local_addr().unwrap().port();
        let addresses = host_ipv4_addresses();
        assert!(addresses.contains(&"127.0.0.1".to_owned()), "{addresses:?}");
        let mut targets: Vec<(String, u16)> = addresses.iter().map(|a| (a.clone(), port)).collect();
        // The internet and its DNS, too.
        targets.extend([("1.1.1.1".to_owned(), 80), ("8.8.8.8".to_owned(), 53)]);

        let isolated = DockerDeployment::new(config.clone());
        assert!(isolated.capabilities().network_isolation);
        let bridged = DockerDeployment::new(uniagent_sandboxes::DockerConfig {
            network: uniagent_sandboxes::NetworkMode::Bridge,
            ..config
        });
        assert!(!bridged.capabilities().network_isolation);
        let (ra, rb) = tokio::join!(isolated.start(), bridged.start());
        ra.unwrap();
        rb.unwrap();
        let gateway = bridge_gateway(&bridged.info().await.unwrap().container_id).await;
        assert!(
            addresses.contains(&gateway),
            "{gateway} not in {addresses:?}"
        );
        assert!(
            isolated
                .info()
                .await
                .unwrap()
                .url
                .starts_with("http://127.0.0.1:"),
            "the host reaches the server on its own loopback"
        );

        // Only loopback inside.
        let interfaces = isolated
            .sh("ls /sys/class/net", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(
            interfaces.stdout.split_whitespace().collect::<Vec<_>>(),
            ["lo"]
        );

        let probe = connect_probe(&targets);
        let out = isolated.sh(&probe, Duration::from_secs(60)).await.unwrap();
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), targets.len(), "{out:?}");
        for line in &lines {
            assert!(
                !line.ends_with("connected"),
                "reachable from the sandbox: {out:?}"
            );
        }
        // The probe does detect a connection: the sandbox's own server on loopback answers.
        let own = isolated
            .sh(
                &connect_probe(&[("127.0.0.1".into(), 8000)]),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(own.stdout, "127.0.0.1 8000 connected\n", "{own:?}");
        let dns = isolated
        .sh(
            "python3 -c \"import socket; socket.getaddrinfo('deb.debian.org', 80)\" 2>/dev/null \
             && echo resolved || echo failed",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(dns.stdout, "failed\n", "{dns:?}");

        // Positive control: the same probe from a bridged sandbox reaches the host's bridge address.
        let out = bridged
            .sh(
                &connect_probe(&[(gateway.clone(), port)]),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        assert_eq!(
            out.stdout,
            format!("{gateway} {port} connected\n"),
            "{out:?}"
        );

        isolated.stop().await.unwrap();
        bridged.stop().await.unwrap();
        drop(service);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_root_user_runs_the_server_and_its_shells_without_root_powers() {
    deadline(
        "a_non_root_user_runs_the_server_and_its_shells_without_root_powers",
        DEFAULT,
        async {
            let Some(mut config) = config_or_skip("user").await else {
                return;
            };
            // `nobody` by number; with the read-only root the work dir is a tmpfs the user owns.
            config.user = Some("65534:65534".into());
            config.read_only_root = true;
            let sandbox = DockerDeployment::new(config);
            sandbox.start().await.unwrap();
            let out = sandbox
                .sh(
                    "id -u; id -g; echo hi > note && cat note",
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
            assert_eq!(
                (out.stdout.as_str(), out.exit_code),
                ("65534\n65534\nhi\n", Some(0)),
                "{out:?}"
            );
            // Neither root's files nor the image's system directories are writable.
            let out = sandbox
                .sh(
                    "touch /root/x 2>&1; touch /etc/x 2>&1; cat /etc/shadow 2>&1; echo done",
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
            assert!(!out.stdout.contains("65534"), "{out:?}");
            assert_eq!(
                out.stdout.matches("ermission denied").count()
                    + out.stdout.matches("Read-only file system").count(),
                3,
                "{out:?}"
            );
            // A session runs as the same user.
            sandbox
                .create_session(uniagent_core::sandbox::CreateSessionRequest::new("s"))
                .await
                .unwrap();
            let out = sandbox
                .bash("s", "id -u", Duration::from_secs(10))
                .await
                .unwrap();
            assert_eq!(out.output.trim(), "65534");
            sandbox.stop().await.unwrap();
        },
    )
    .await;
}
