//! 1,000 sandboxes claimed at once from the fake cluster (`k8s::fake`: the API server, the
//! controller starting a real `uniagent-sandbox` process per sandbox): every one starts, runs a
//! command and is released; nothing is left behind (claims, sandboxes, pods, processes). Prints
//! what it measured (wall time, start p50/p99 and where the start time went).
//!
//! `UNIAGENT_K8S_SCALE_CLAIMS` sets the count (default 1,000).

#![cfg(feature = "k8s-fake")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::future::join_all;
use uniagent_core::{Deployment, DeploymentExt};
use uniagent_sandboxes::k8s::fake::{FakeCluster, FakeOptions, Resource, FAKE_KID};
use uniagent_sandboxes::k8s::{K8sConfig, K8sDeployment};

const NS: &str = "uniagent-agent-sandboxes";
const TEST_DEADLINE: Duration = Duration::from_secs(600);

fn count() -> usize {
    std::env::var("UNIAGENT_K8S_SCALE_CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// One sandbox's start, start timings, first command and stop.
type Step = (
    Duration,
    uniagent_sandboxes::k8s::StartTimings,
    Duration,
    Duration,
);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_claims_start_run_and_are_all_released() {
    let body = async {
        let n = count();
        let fake = FakeCluster::start(FakeOptions {
            cold_delay: Duration::from_millis(50),
            ..FakeOptions::default()
        })
        .await
        .expect("the fake cluster starts (is uniagent-sandbox built?)");
        // The keys ConfigMap the rendered templates mount.
        fake.create_warm_pool(NS, "keys-only", 0).await.unwrap();
        let cfg = K8sConfig {
            namespace: NS.into(),
            image: "python:3.12-slim".into(),
            carrier_image: "registry.example/uniagent-sandbox-carrier:0.1".into(),
            work_dir: "/".into(),
            // Every claim a cold start: the controller creates all n sandboxes under load.
            warm: 0,
            api_url: Some(fake.api_url()),
            signing_key_file: Some(fake.signing_key_file().to_path_buf()),
            key_id: FAKE_KID.into(),
            run_id: Some("scale".into()),
            start_timeout: Duration::from_secs(400),
            probe_timeout: Duration::from_secs(120),
            api_timeout: Duration::from_secs(60),
            delete_timeout: Duration::from_secs(120),
            ..K8sConfig::default()
        };
        let began = Instant::now();
        let runs = (0..n).map(|i| {
            let cfg = cfg.clone();
            async move {
                let sandbox = K8sDeployment::for_rollout(cfg, Some(format!("t{i}:0"))).unwrap();
                let started = Instant::now();
                sandbox
                    .start()
                    .await
                    .map_err(|e| format!("start {i}: {e}"))?;
                let start = started.elapsed();
                let timings = sandbox.info().await.unwrap().timings;
                let commanded = Instant::now();
                let out = sandbox
                    .sh(&format!("echo {i}"), Duration::from_secs(120))
                    .await
                    .map_err(|e| format!("command {i}: {e}"))?;
                assert_eq!(out.stdout, format!("{i}\n"));
                let command = commanded.elapsed();
                let stopping = Instant::now();
                sandbox.stop().await.map_err(|e| format!("stop {i}: {e}"))?;
                Ok::<_, String>((start, timings, command, stopping.elapsed()))
            }
        });
        let results = join_all(runs).await;
        let wall = began.elapsed();
        let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert!(
            failures.is_empty(),
            "{} of {n} failed, first: {}",
            failures.len(),
            failures[0]
        );
        let sorted = |pick: fn(&Step) -> Duration| {
            let mut all: Vec<Duration> = results.iter().flatten().map(pick).collect();
            all.sort();
            all
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (starts, commands, stops) = (sorted(|r| r.0), sorted(|r| r.2), sorted(|r| r.3));
        let mean = |f: fn(&uniagent_sandboxes::k8s::StartTimings) -> Duration| {
            results.iter().flatten().map(|r| f(&r.1)).sum::<Duration>() / n as u32
        };
        eprintln!(
            "k8s scale: {n} claims at once, all released: wall {:.1} s; start p50 {:.0} ms, p99 {:.0} ms (mean create {:.0} ms, ready {:.0} ms, probe {:.0} ms); first command p50 {:.0} ms; stop p50 {:.0} ms, p99 {:.0} ms",
            wall.as_secs_f64(),
            ms(percentile(&starts, 0.5)),
            ms(percentile(&starts, 0.99)),
            ms(mean(|t| t.create)),
            ms(mean(|t| t.ready)),
            ms(mean(|t| t.probe)),
            ms(percentile(&commands, 0.5)),
            ms(percentile(&stops, 0.5)),
            ms(percentile(&stops, 0.99)),
        );
        // Nothing is left: stop waited for each claim to be gone; the controller then removes
        // the sandboxes, pods and processes.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let store = fake.store();
            let left = |r: Resource| store.list(r, Some(NS), |_| true).0.len();
            let (claims, sandboxes, pods, processes) = (
                left(Resource::SandboxClaims),
                left(Resource::Sandboxes),
                left(Resource::Pods),
                fake.running_sandboxes(),
            );
            if claims + sandboxes + pods + processes == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "left behind: {claims} claims, {sandboxes} sandboxes, {pods} pods, {processes} processes"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        fake.shutdown().await;
    };
    tokio::time::timeout(TEST_DEADLINE, body)
        .await
        .expect("1,000 claims finish within the test deadline");
}
