//! RL loss throughput on CPU: our tch port of verl's policy losses (forward + backward) against
//! verl 0.9.1's own functions in PyTorch eager, measured in the same run on the same batch.
//!
//! ```sh
//! source scripts/env/torch.sh
//! cargo bench -p uniagent-benches --features tch --bench rl_losses
//! ```
//!
//! Prints, per loss mode and aggregation, the median time of one forward + backward for a
//! `B × T` batch, ours and verl's (the baseline runs `benches/rl_losses_verl.py` with the
//! `.venv-torch` python), and their ratio. Both sides use the same number of intra-op threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Instant;

use tch::{Device, Kind, Tensor};
use uniagent_train::rl::*;

const B: i64 = 64;
const T: i64 = 2048;
const ITERS: usize = 30;
const THREADS: i32 = 1;

fn median_ms(mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let mut times: Vec<f64> = (0..ITERS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[ITERS / 2]
}

fn main() {
    tch::set_num_threads(THREADS);
    tch::manual_seed(0);
    let opts = (Kind::Float, Device::Cpu);
    let mask = Tensor::rand([B, T], opts).lt(0.8).to_kind(Kind::Int64);
    let old = -Tensor::rand([B, T], opts) * 3.0;
    let logp = &old + Tensor::randn([B, T], opts) * 0.3;
    let scores = Tensor::rand([B], opts).lt(0.5).to_kind(Kind::Float);
    let uids: Vec<String> = (0..B).map(|i| format!("p{}", i / 8)).collect();
    let groups = Groups::from_uids(&uids);
    let rewards = token_level_rewards(&scores, &mask).unwrap();
    let adv = grpo_advantages(&rewards, &mask, &groups, true, GRPO_EPSILON).unwrap();
    let clip = ClipConfig {
        clip_ratio_low: 0.2,
        clip_ratio_high: 0.28,
        clip_ratio_c: 3.0,
    };
    let info = GlobalBatchInfo::for_mini_batch(&mask).unwrap();

    let mut ours = Vec::new();
    for mode in PolicyLossMode::ALL {
        for agg in [LossAggMode::TokenMean, LossAggMode::SeqMeanTokenMean] {
            let ms = median_ms(|| {
                let lp = logp.detach().set_requires_grad(true);
                let inputs = LossInputs::new(&old, &lp, &adv, &mask);
                let out = policy_loss(mode, inputs, &clip, agg, &info).unwrap();
                out.loss.backward();
            });
            ours.push((format!("{mode}/{agg}"), ms));
        }
    }
    let grpo_ms = median_ms(|| {
        let adv = grpo_advantages(&rewards, &mask, &groups, true, GRPO_EPSILON).unwrap();
        std::hint::black_box(&adv);
    });
    ours.push(("grpo advantages".to_owned(), grpo_ms));

    let baseline = verl_baseline();
    println!("rl_losses: B={B} T={T}, {THREADS} thread(s), median of {ITERS} (forward + backward)");
    println!(
        "{:<36} {:>10} {:>10} {:>8}",
        "case", "ours ms", "verl ms", "verl/ours"
    );
    for (name, ms) in &ours {
        match baseline
            .as_ref()
            .and_then(|b| b.get(name))
            .and_then(serde_json::Value::as_f64)
        {
            Some(v) => println!("{name:<36} {ms:>10.3} {v:>10.3} {:>8.2}", v / ms),
            None => println!("{name:<36} {ms:>10.3} {:>10} {:>8}", "-", "-"),
        }
    }
}

fn verl_baseline() -> Option<serde_json::Value> {
    let Some(venv) = std::env::var_os("UNIAGENT_TORCH_VENV") else {
        eprintln!("no baseline: UNIAGENT_TORCH_VENV is unset (source scripts/env/torch.sh)");
        return None;
    };
    let python = std::path::Path::new(&venv).join("bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/rl_losses_verl.py");
    let out = Command::new(python)
        .arg(script)
        .args([
            B.to_string(),
            T.to_string(),
            ITERS.to_string(),
            THREADS.to_string(),
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "verl baseline failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}
