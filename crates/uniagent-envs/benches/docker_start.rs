//! Docker backend start-up benchmark (not part of the test suite):
//!
//! ```text
//! cargo bench -p uniagent-envs --features docker --bench docker_start
//! ```
//!
//! Measures, on the sandbox image (`$UNIAGENT_DOCKER_IMAGE`, else
//! `uniagent-sandbox-base:latest`):
//! 1. `start()` to the first successful `execute`, 20 times one after another (median, p90);
//! 2. 32 concurrent starts, each followed by an `execute` (wall time, per-sandbox median);
//! 3. in the same run, as the baseline: the `host` backend (the same server as a local
//!    process); the docker figure is also printed as a ratio to it.
//!
//! SWE-ReX's own `DockerDeployment` is not measured: it needs `swerex-remote` inside the image
//! (its fallback pip-installs swe-rex, and the image has no network). Committing the host's
//! swe-rex venv into the image (re-pointed at Debian's python3.11) did not give a server that
//! answered within its startup timeout, and was dropped.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::future::join_all;
use uniagent_core::{Deployment, DeploymentExt};
use uniagent_envs::{DockerConfig, DockerDeployment, HostConfig, HostDeployment, NetworkMode};

const SEQUENTIAL: usize = 20;
const CONCURRENT: usize = 32;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(run());
}

fn config(network: NetworkMode) -> DockerConfig {
    DockerConfig {
        image: std::env::var("UNIAGENT_DOCKER_IMAGE")
            .unwrap_or_else(|_| "uniagent-sandbox-base:latest".into()),
        memory_bytes: Some(256 << 20),
        network,
        max_concurrent_starts: 8,
        server_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))),
        run_id: Some(format!("bench-{}", std::process::id())),
        ..DockerConfig::default()
    }
}

async fn start_to_first_exec<D: Deployment>(sandbox: &D) -> Duration {
    let t0 = Instant::now();
    sandbox
        .start()
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
    let out = sandbox
        .sh("echo ready", 30.0)
        .await
        .unwrap_or_else(|e| panic!("exec: {e}"));
    assert_eq!(out.stdout, "ready\n");
    t0.elapsed()
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        ms(samples[samples.len() / 2]),
        ms(samples[(samples.len() * 9 / 10).min(samples.len() - 1)]),
    )
}

async fn sequential_docker(network: NetworkMode) -> (f64, f64) {
    let mut samples = Vec::new();
    for _ in 0..SEQUENTIAL {
        let sandbox = DockerDeployment::new(config(network));
        samples.push(start_to_first_exec(&sandbox).await);
        sandbox.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
    }
    stats(samples)
}

async fn concurrent_docker() -> (f64, f64) {
    let sandboxes: Vec<DockerDeployment> = (0..CONCURRENT)
        .map(|_| DockerDeployment::new(config(NetworkMode::None)))
        .collect();
    let t0 = Instant::now();
    let samples = join_all(sandboxes.iter().map(start_to_first_exec)).await;
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    join_all(sandboxes.iter().map(|s| s.stop())).await;
    (wall, stats(samples).0)
}

async fn sequential_host() -> (f64, f64) {
    let mut samples = Vec::new();
    for _ in 0..SEQUENTIAL {
        let sandbox = HostDeployment::new(HostConfig {
            server_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))),
            ..HostConfig::default()
        });
        samples.push(start_to_first_exec(&sandbox).await);
        sandbox.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
    }
    stats(samples)
}

async fn run() {
    if let Err(e) = uniagent_envs::docker::daemon_reachable().await {
        eprintln!("docker_start: no Docker daemon ({e}); nothing to measure");
        return;
    }
    // Warm-up: the first start commits the payload image.
    let warm = DockerDeployment::new(config(NetworkMode::None));
    let first = start_to_first_exec(&warm).await;
    warm.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
    println!(
        "first start (commits the payload image): {:.0} ms",
        first.as_secs_f64() * 1e3
    );

    let (iso_med, iso_p90) = sequential_docker(NetworkMode::None).await;
    let (br_med, br_p90) = sequential_docker(NetworkMode::Bridge).await;
    let (host_med, host_p90) = sequential_host().await;
    let (wall, conc_med) = concurrent_docker().await;
    println!("start() -> first execute, {SEQUENTIAL} sequential starts:");
    println!("  docker network=none (exec relay) median {iso_med:7.1} ms  p90 {iso_p90:7.1} ms");
    println!("  docker network=bridge (published) median {br_med:7.1} ms  p90 {br_p90:7.1} ms");
    println!("  host backend (baseline)           median {host_med:7.1} ms  p90 {host_p90:7.1} ms");
    println!(
        "  docker/host ratio: {:.1}x",
        iso_med / host_med.max(f64::EPSILON)
    );
    println!("{CONCURRENT} concurrent starts (max_concurrent_starts=8): wall {wall:.0} ms, per-sandbox median {conc_med:.0} ms");
    println!("SWE-ReX DockerDeployment baseline: not measured (see the module docs)");
}
