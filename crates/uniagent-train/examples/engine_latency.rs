//! Latency of short requests to the tch engine while a long generation runs.
//!
//! ```text
//! cargo run -p uniagent-train --features tch --release --example engine_latency -- \
//!     [--model DIR] [--short 40] [--short-tokens 8] [--long-tokens 2048]
//! ```
//!
//! Sends `--short` requests one after the other (each `--short-tokens` greedy tokens on a
//! short prompt) to an engine, first idle (the baseline) and then while one request of
//! `--long-tokens` tokens is being decoded, and prints the p50 and p99 of their latency in
//! both conditions with the loaded/idle ratios. The long request's budget is far above what
//! the short ones take, so every short request of the second run meets it in flight.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uniagent_core::{GenerateRequest, SamplingParams, TokenGenerator};
use uniagent_train::generate::{EngineConfig, TchEngine};
use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Args {
    model: PathBuf,
    short: usize,
    short_tokens: usize,
    long_tokens: usize,
}

fn parse() -> Result<Args> {
    let mut args = Args {
        model: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2"),
        short: 40,
        short_tokens: 8,
        long_tokens: 2048,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--model" => args.model = value.into(),
            "--short" => args.short = value.parse()?,
            "--short-tokens" => args.short_tokens = value.parse()?,
            "--long-tokens" => args.long_tokens = value.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(args)
}

/// The `q` quantile (nearest rank) of sorted `values`.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

async fn short_latencies(engine: &TchEngine, args: &Args) -> Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(args.short);
    for i in 0..args.short {
        let request = GenerateRequest::new(
            vec![9707, 1879, 13 + i as u32 % 50],
            SamplingParams::greedy(),
            args.short_tokens,
        );
        let start = Instant::now();
        engine.generate(request).await?;
        latencies.push(start.elapsed());
    }
    latencies.sort();
    Ok(latencies)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse()?;
    let model = Qwen2ForCausalLM::load(
        &args.model,
        uniagent_train::tch::Device::Cpu,
        ModelDtype::F32,
    )?;
    let engine = Arc::new(TchEngine::new(model, EngineConfig::default()));
    // Warm-up, then the idle baseline.
    short_latencies(
        &engine,
        &Args {
            short: 3,
            ..parse()?
        },
    )
    .await?;
    let idle = short_latencies(&engine, &args).await?;
    let long = tokio::spawn({
        let engine = Arc::clone(&engine);
        let request =
            GenerateRequest::new(vec![9707, 1879], SamplingParams::greedy(), args.long_tokens);
        async move { engine.generate(request).await }
    });
    while engine.tokens_sampled() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = Instant::now();
    let loaded = short_latencies(&engine, &args).await?;
    let still_running = !long.is_finished();
    let long_out = long.await??;
    println!(
        "{} short requests of {} tokens; long request: {} tokens, {}",
        args.short,
        args.short_tokens,
        long_out.token_ids.len(),
        if still_running {
            "in flight for every short request"
        } else {
            "ended before the last short request"
        }
    );
    println!("{:<26} {:>10} {:>10}", "", "p50 (ms)", "p99 (ms)");
    for (name, lat) in [("idle engine", &idle), ("beside the long request", &loaded)] {
        println!(
            "{name:<26} {:>10.1} {:>10.1}",
            millis(quantile(lat, 0.5)),
            millis(quantile(lat, 0.99))
        );
    }
    println!(
        "loaded/idle ratio: p50 {:.2}x, p99 {:.2}x (short requests took {:.1} s in all)",
        millis(quantile(&loaded, 0.5)) / millis(quantile(&idle, 0.5)),
        millis(quantile(&loaded, 0.99)) / millis(quantile(&idle, 0.99)),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
