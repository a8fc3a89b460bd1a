//! The `k8s` backend's own overhead from claim creation to the first command (not part of the
//! test suite):
//!
//! ```text
//! cargo bench -p uniagent-sandboxes --features k8s-fake --bench k8s_claim
//! ```
//!
//! Against the stand-in cluster (`k8s::fake`, in this process, over real sockets) with a warm
//! pool of `CLAIMS` ready sandboxes and no adoption delay, `CLAIMS` sandboxes are started one
//! after another, each `start()` then `execute("true")`, and stopped (untimed). Per step, p50
//! and p99: `ensure` (nothing after the first start), `create` (the claim's API request),
//! `ready` (created claim → Ready event: the cluster's part, here the fake controller's pass and
//! the watch), `probe` (token, client, first `is_alive`), `command` (the first `execute`).
//! **Ours** is everything but `ready`. Baseline, in the same run: the same sandbox server's
//! floor, a fresh client's `is_alive` plus `execute("true")` on a running sandbox; the ratio
//! ours / floor is what the backend adds on top of reaching a server at all.

#![allow(clippy::expect_used)] // a bench: a failed step ends it with its message

use std::time::{Duration, Instant};

use uniagent_core::sandbox::Command;
use uniagent_core::Deployment;
use uniagent_sandboxes::client::{RemoteRuntime, RemoteRuntimeOptions};
use uniagent_sandboxes::k8s::fake::{FakeCluster, FakeOptions, FAKE_KID};
use uniagent_sandboxes::k8s::{render, K8sConfig, K8sDeployment};

#[allow(dead_code)] // the helpers the other benches use
mod common;

use common::block_on;

const NS: &str = "uniagent-agent-sandboxes";

fn claims() -> usize {
    std::env::var("UNIAGENT_K8S_BENCH_CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn main() {
    block_on(run());
}

fn quantiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run() {
    let n = claims();
    let fake = FakeCluster::start(FakeOptions {
        server_binary: Some(env!("CARGO_BIN_EXE_uniagent-sandbox").into()),
        ..FakeOptions::default()
    })
    .await
    .expect("the fake cluster starts");
    fake.create_warm_pool(NS, "keys-only", 0)
        .await
        .expect("the keys ConfigMap");
    let cfg = K8sConfig {
        namespace: NS.into(),
        image: "python:3.12-slim".into(),
        carrier_image: "carrier:1".into(),
        work_dir: "/".into(),
        warm: n as u32,
        api_url: Some(fake.api_url()),
        signing_key_file: Some(fake.signing_key_file().to_path_buf()),
        key_id: FAKE_KID.into(),
        run_id: Some("bench".into()),
        start_timeout: Duration::from_secs(60),
        ..K8sConfig::default()
    };
    // The first start applies the template and pool; then the pool fills.
    let first = K8sDeployment::new(cfg.clone()).expect("settings");
    first.start().await.expect("first start");
    let ensure = first.info().await.expect("running").timings.ensure;
    first.stop().await.expect("stop");
    let pool = render::template_and_pool(&cfg, &cfg.image)
        .expect("render")
        .name;
    let filled = Instant::now();
    fake.wait_pool_ready(NS, &pool, n as u64, Duration::from_secs(600))
        .await
        .expect("the warm pool fills");
    println!(
        "k8s_claim: {n} claims on a warm pool of {n} (filled in {:.1} s); first start's ensure {:.1} ms",
        filled.elapsed().as_secs_f64(),
        ms(ensure)
    );

    let (mut create, mut ready, mut probe, mut command, mut ours, mut total) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut floor = vec![];
    for _ in 0..n {
        let sandbox = K8sDeployment::new(cfg.clone()).expect("settings");
        let began = Instant::now();
        sandbox.start().await.expect("start");
        let started = Instant::now();
        sandbox
            .execute(Command::shell("true", Some(10.0)))
            .await
            .expect("first command");
        let done = Instant::now();
        let info = sandbox.info().await.expect("running");
        let t = info.timings;
        let first_command = done - started;
        create.push(t.create);
        ready.push(t.ready);
        probe.push(t.probe);
        command.push(first_command);
        total.push(done - began);
        ours.push((done - began).saturating_sub(t.ready));
        // The floor: a fresh client of the same running server, `is_alive` then the command.
        let token = fake.mint(&info.sandbox);
        let runtime = RemoteRuntime::new(&info.url, Some(token), RemoteRuntimeOptions::default())
            .expect("client");
        let at = Instant::now();
        runtime
            .wait_until_alive(Duration::from_secs(10))
            .await
            .expect("alive");
        runtime
            .execute(&Command::shell("true", Some(10.0)))
            .await
            .expect("command");
        floor.push(at.elapsed());
        sandbox.stop().await.expect("stop");
    }
    println!("{:<10} {:>9} {:>9}", "step", "p50 ms", "p99 ms");
    for (name, samples) in [
        ("create", create),
        ("ready", ready),
        ("probe", probe),
        ("command", command),
        ("total", total),
        ("ours", ours.clone()),
        ("floor", floor.clone()),
    ] {
        let (p50, p99) = quantiles(samples);
        println!("{name:<10} {:>9.2} {:>9.2}", ms(p50), ms(p99));
    }
    let (ours50, ours99) = quantiles(ours);
    let (floor50, floor99) = quantiles(floor);
    println!(
        "ours / floor: p50 {:.2}x, p99 {:.2}x (ours p50 {:.2} ms; target <= 5 ms)",
        ours50.as_secs_f64() / floor50.as_secs_f64(),
        ours99.as_secs_f64() / floor99.as_secs_f64(),
        ms(ours50)
    );
    fake.shutdown().await;
}
