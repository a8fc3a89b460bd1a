//! Sandbox pool benchmark (not part of the test suite):
//!
//! ```text
//! cargo bench -p uniagent-sandboxes --features pool,faas --bench pool_acquire
//! ```
//!
//! On the sandbox image (`$UNIAGENT_DOCKER_IMAGE`, else `uniagent-sandbox-base:latest`), in one
//! run and side by side:
//! 1. **Acquire to first command**, `ROUNDS` times one after another: a cold start through the
//!    `docker` backend (`start()` then `execute`), the baseline; then a lease from a warm pool
//!    through the `faas` backend (`start()` = capacity probe + lease + `is_alive` through the
//!    pool's proxy, then `execute`). Medians, p90s and the ratio cold / warm.
//! 2. **Leases per second one pool sustains**: `CLIENTS` concurrent clients each leasing,
//!    running one command and releasing, for `WINDOW`, with a warm pool of `WARM` behind them
//!    (so the rate includes the pool's refilling with cold starts, i.e. what a node sustains,
//!    not only its bookkeeping).
//! 3. **Control requests per second**: renewals of one lease from `CLIENTS` concurrent clients
//!    (the pool's request rate when nothing starts).
//!
//! The pool runs in this process on 127.0.0.1 (the client's requests still cross a real
//! socket). After the run the bench checks that nothing was left behind.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use uniagent_core::config::{parse, ConfigFormat};
use uniagent_core::Deployment;
use uniagent_sandboxes::pool::{Pool, PoolConfig};
use uniagent_sandboxes::{DockerConfig, DockerDeployment, FaasConfig, FaasDeployment};

mod common;

use common::{block_on, start_to_first_command};

const ROUNDS: usize = 50;
const WARM: usize = 4;
const CLIENTS: usize = 8;
const WINDOW: Duration = Duration::from_secs(20);

fn main() {
    block_on(run());
}

fn image() -> String {
    std::env::var("UNIAGENT_DOCKER_IMAGE").unwrap_or_else(|_| "uniagent-sandbox-base:latest".into())
}

fn server_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))
}

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.9))
}

async fn run() {
    let name = format!("bench-{}", std::process::id());
    let config: PoolConfig = parse(
        &format!(
            "name: {name}\ncapacity: {}\nlease_ttl: 60\nimages:\n  - warm: {WARM}\n    docker:\n      image: {}\n      memory_bytes: {}\n      server_binary: {}\n",
            WARM + CLIENTS + 2,
            image(),
            256u64 << 20,
            server_binary().display()
        ),
        ConfigFormat::Yaml,
    )
    .unwrap_or_else(|e| panic!("pool config: {e}"));
    let pool = Pool::start(config)
        .await
        .unwrap_or_else(|e| panic!("pool: {e}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let url = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn({
        let pool = pool.clone();
        async move {
            let _ = pool
                .serve(listener, async {
                    let _ = stop_rx.await;
                })
                .await;
        }
    });
    let faas = FaasConfig {
        control_url: url.clone(),
        image: image(),
        lease_ttl: Duration::from_secs(30),
        ..FaasConfig::default()
    };
    let docker = DockerConfig {
        image: image(),
        memory_bytes: Some(256 << 20),
        server_binary: Some(server_binary()),
        run_id: Some(format!("{name}-cold")),
        ..DockerConfig::default()
    };

    acquire_cold_and_warm(&pool, &faas, &docker).await;
    sustained_leases(&pool, &faas).await;
    renewals_per_second(&url).await;
    let _ = stop_tx.send(());
    let _ = serving.await;
    nothing_left_behind(&name).await;
}

/// 1. Acquire to first command, cold docker vs warm pool, interleaved round by round so that
///    both see the same machine load.
async fn acquire_cold_and_warm(pool: &Pool, faas: &FaasConfig, docker: &DockerConfig) {
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        wait_warm(pool).await;
        let sandbox = FaasDeployment::new(faas.clone()).unwrap_or_else(|e| panic!("{e}"));
        warm.push(start_to_first_command(&sandbox).await);
        let was_warm = sandbox.info().await.is_some_and(|i| i.lease.warm);
        assert!(was_warm, "the warm pool was empty; raise WARM");
        sandbox.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
        let sandbox = DockerDeployment::new(docker.clone());
        cold.push(start_to_first_command(&sandbox).await);
        sandbox.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
    }
    let (cold_med, cold_p90) = stats(cold);
    let (warm_med, warm_p90) = stats(warm);
    println!("acquire to first command ({ROUNDS} rounds, interleaved):");
    println!("  cold docker backend   median {cold_med:>10.1?}  p90 {cold_p90:>10.1?}");
    println!("  warm pool via faas    median {warm_med:>10.1?}  p90 {warm_p90:>10.1?}");
    println!(
        "  ratio cold / warm (median): {:.1}x",
        cold_med.as_secs_f64() / warm_med.as_secs_f64()
    );
}

/// 2. Leases per second: lease, one command, release, from CLIENTS clients.
async fn sustained_leases(pool: &Pool, faas: &FaasConfig) {
    wait_warm(pool).await;
    let done = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + WINDOW;
    let t0 = Instant::now();
    join_all((0..CLIENTS).map(|_| {
        let (faas, done) = (faas.clone(), done.clone());
        async move {
            while Instant::now() < until {
                let sandbox = FaasDeployment::new(faas.clone()).unwrap_or_else(|e| panic!("{e}"));
                start_to_first_command(&sandbox).await;
                sandbox.stop().await.unwrap_or_else(|e| panic!("stop: {e}"));
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    }))
    .await;
    let leases = done.load(Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    println!(
        "leases sustained by one pool ({CLIENTS} clients, warm {WARM}, lease + command + release): {leases} in {elapsed:.1} s = {:.2}/s",
        leases as f64 / elapsed
    );
}

/// 3. Control requests per second: renewals of one lease.
async fn renewals_per_second(url: &str) {
    let http = reqwest::Client::new();
    let lease: serde_json::Value = http
        .post(format!("{url}/v1/leases"))
        .json(&serde_json::json!({"image": image()}))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("lease: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("lease body: {e}"));
    let id = lease["id"].as_str().unwrap_or_default().to_owned();
    let token = lease["token"].as_str().unwrap_or_default().to_owned();
    let renewals = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(5);
    let t0 = Instant::now();
    join_all((0..CLIENTS).map(|_| {
        let (http, renewals) = (http.clone(), renewals.clone());
        let (url, id, token) = (url.to_owned(), id.clone(), token.clone());
        async move {
            while Instant::now() < until {
                let ok = http
                    .post(format!("{url}/v1/leases/{id}/renew"))
                    .header("x-api-key", &token)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                assert!(ok, "renewal failed");
                renewals.fetch_add(1, Ordering::Relaxed);
            }
        }
    }))
    .await;
    let elapsed = t0.elapsed().as_secs_f64();
    println!(
        "control requests (renewals, {CLIENTS} clients): {:.0}/s",
        renewals.load(Ordering::Relaxed) as f64 / elapsed
    );
}

/// The pool's releases and the cold containers are all removed.
async fn nothing_left_behind(name: &str) {
    let docker_engine = uniagent_sandboxes::docker::engine()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Releases remove containers in the background: give them a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = uniagent_sandboxes::docker::list_managed(&docker_engine, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .filter(|c| c.run_id == format!("pool-{name}") || c.run_id == format!("{name}-cold"))
            .count();
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bench left {left} containers behind"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the warm pool is full again.
async fn wait_warm(pool: &Pool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while pool.capacity().warm < WARM && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
