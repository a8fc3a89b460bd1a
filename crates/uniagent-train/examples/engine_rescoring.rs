//! What batch-invariant logprobs cost: the tch engine with and without
//! `EngineConfig::batch_invariant_logprobs`, in the same run.
//!
//! ```text
//! cargo run -p uniagent-train --features tch --release --example engine_rescoring -- \
//!     [--model DIR] [--requests 32] [--prompt 256] [--tokens 64] [--rounds 5]
//! ```
//!
//! Each round sends `--requests` concurrent seeded requests (a `--prompt`-token prompt each,
//! `--tokens` sampled tokens at temperature 1) to an engine without rescoring and then to one
//! with it, and times both. Prints the median wall time and sampled tokens per second of each,
//! the ratio, and whether both engines sampled the same tokens (they should: rescoring changes
//! only the reported logprobs). `--model` defaults to the `tiny-qwen2` fixture, whose
//! 151,936-token vocabulary makes the output projection most of the work (the worst case for
//! rescoring); the quickstart's policy (`OUT/policy` of a `uniagent train` run) is the case the
//! deterministic async schedule meets.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uniagent_core::{GenerateRequest, SamplingParams, TokenGenerator};
use uniagent_train::generate::{EngineConfig, TchEngine};
use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Args {
    model: PathBuf,
    requests: usize,
    prompt: usize,
    tokens: usize,
    rounds: usize,
}

fn parse() -> Result<Args> {
    let mut args = Args {
        model: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2"),
        requests: 32,
        prompt: 256,
        tokens: 64,
        rounds: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--model" => args.model = value.into(),
            "--requests" => args.requests = value.parse()?,
            "--prompt" => args.prompt = value.parse()?,
            "--tokens" => args.tokens = value.parse()?,
            "--rounds" => args.rounds = value.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(args)
}

/// Sends every request at once; returns the wall time and each request's tokens.
async fn round(
    engine: &Arc<TchEngine>,
    args: &Args,
    vocab: u32,
) -> Result<(Duration, Vec<Vec<u32>>)> {
    let started = Instant::now();
    let calls: Vec<_> = (0..args.requests)
        .map(|i| {
            let prompt = (0..args.prompt)
                .map(|k| ((i * 7919 + k * 104_729) as u32) % vocab)
                .collect();
            let sampling = SamplingParams {
                temperature: 1.0,
                seed: Some(i as u64),
                ..SamplingParams::default()
            };
            // Length-limited only: no stop ids, so every request samples `--tokens`.
            let request = GenerateRequest::new(prompt, sampling, args.tokens);
            let engine = Arc::clone(engine);
            tokio::spawn(async move { engine.generate(request).await })
        })
        .collect();
    let mut tokens = Vec::with_capacity(calls.len());
    for call in calls {
        tokens.push(call.await??.token_ids);
    }
    Ok((started.elapsed(), tokens))
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse()?;
    let load = || {
        Qwen2ForCausalLM::load(
            &args.model,
            uniagent_train::tch::Device::Cpu,
            ModelDtype::F32,
        )
    };
    let vocab = load()?.config().vocab_size as u32;
    let engine = |rescore: bool| -> Result<Arc<TchEngine>> {
        let config = EngineConfig {
            batch_invariant_logprobs: rescore,
            ..EngineConfig::default()
        };
        Ok(Arc::new(TchEngine::new(load()?, config)))
    };
    let (plain, rescoring) = (engine(false)?, engine(true)?);
    // Warm-up of both.
    round(&plain, &args, vocab).await?;
    round(&rescoring, &args, vocab).await?;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut same_tokens = true;
    for _ in 0..args.rounds {
        let (a, tokens_a) = round(&plain, &args, vocab).await?;
        let (b, tokens_b) = round(&rescoring, &args, vocab).await?;
        same_tokens &= tokens_a == tokens_b;
        without.push(a);
        with.push(b);
    }
    let sampled = (args.requests * args.tokens) as f64;
    let (a, b) = (median(&mut without), median(&mut with));
    println!(
        "{} requests x ({} prompt + {} sampled tokens), vocabulary {vocab}, {} rounds, medians:",
        args.requests, args.prompt, args.tokens, args.rounds
    );
    for (name, t) in [("plain", a), ("batch-invariant logprobs", b)] {
        println!(
            "{name:<26} {:>9.1} ms {:>10.0} tokens/s",
            t.as_secs_f64() * 1e3,
            sampled / t.as_secs_f64()
        );
    }
    println!(
        "batch-invariant / plain wall time: {:.2}x; same tokens sampled: {same_tokens}",
        b.as_secs_f64() / a.as_secs_f64()
    );
    Ok(())
}
