//! Policy throughput on CPU: our tch Qwen2 (generation engine and trainer step) against
//! PyTorch eager + transformers doing the same work on the same weights, in the same run.
//!
//! ```sh
//! source scripts/env/torch.sh
//! cargo bench -p uniagent-benches --features tch --bench tch_policy
//! ```
//!
//! A small random-weight Qwen2 (float32) is written as a Hugging Face checkpoint; then
//! - generation: greedy decoding of `GEN_BATCH` prompts × `PROMPT` tokens, `NEW` new tokens each
//!   (ours: `generate_batch` with KV cache; baseline: `model.generate(do_sample=False)`);
//! - train step: one SFT step (forward, masked NLL, backward, AdamW) on `TRAIN_BATCH` rows of
//!   `PROMPT + NEW` tokens (ours: `Trainer::step`; baseline: the same in PyTorch).
//!
//! Prints tokens/s for both (median of `ITERS` runs after warm-up) and the ratio ours/PyTorch;
//! both sides use the same number of intra-op threads. No GPU was lent to this task; with a CUDA
//! machine pass `--device cuda` to both sides (not measured here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use std::time::Instant;
use uniagent_train::tch;

use serde_json::{json, Map};
use uniagent_core::rollout::AgentLoopMetrics;
use uniagent_core::{AgentLoopOutput, GenerateRequest, SamplingParams};
use uniagent_train::generate::generate_batch;
use uniagent_train::model::{ModelDtype, Qwen2Config, Qwen2ForCausalLM};
use uniagent_train::trainer::{OptimConfig, TrainBatch, TrainMode, Trainer, TrainerConfig};

const GEN_BATCH: usize = 8;
const TRAIN_BATCH: usize = 8;
const PROMPT: usize = 32;
const NEW: usize = 64;
const ITERS: usize = 5;

fn config() -> Qwen2Config {
    serde_json::from_value(json!({
        "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
        "rope_theta": 1e6, "max_position_embeddings": 4096, "tie_word_embeddings": true
    }))
    .unwrap()
}

fn median(mut f: impl FnMut() -> f64) -> f64 {
    f();
    let mut xs: Vec<f64> = (0..ITERS).map(|_| f()).collect();
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[ITERS / 2]
}

fn prompts() -> Vec<Vec<u32>> {
    (0..GEN_BATCH.max(TRAIN_BATCH))
        .map(|i| {
            (0..PROMPT)
                .map(|t| ((i * 131 + t * 17) % 8000 + 100) as u32)
                .collect()
        })
        .collect()
}

fn main() {
    let threads = tch::get_num_threads();
    let model = Qwen2ForCausalLM::new(config(), tch::Device::Cpu, ModelDtype::F32).unwrap();
    model.init_random(0);
    let dir =
        std::env::temp_dir().join(format!("uniagent-bench-tch-policy-{}", std::process::id()));
    model.save_pretrained(&dir).unwrap();
    let prompts = prompts();

    // Generation: tokens/s over all rows.
    let requests: Vec<GenerateRequest> = prompts[..GEN_BATCH]
        .iter()
        .map(|p| GenerateRequest::new(p.clone(), SamplingParams::greedy(), NEW))
        .collect();
    let ours_gen = median(|| {
        let start = Instant::now();
        let out = generate_batch(&model, &requests, None).unwrap();
        let tokens: usize = out.iter().map(|o| o.token_ids.len()).sum();
        tokens as f64 / start.elapsed().as_secs_f64()
    });

    // Train step: SFT over prompt + response rows (response = the last NEW tokens).
    let rows: Vec<AgentLoopOutput> = prompts[..TRAIN_BATCH]
        .iter()
        .map(|p| AgentLoopOutput {
            prompt_ids: p.clone(),
            response_ids: p.iter().rev().cycle().take(NEW).copied().collect(),
            response_mask: vec![1; NEW],
            response_logprobs: None,
            weight_versions: None,
            reward_score: None,
            num_turns: 2,
            metrics: AgentLoopMetrics::default(),
            extra_fields: Map::new(),
            token_sources: None,
            rerender_ids: None,
        })
        .collect();
    let batch = TrainBatch::sft(rows);
    let train_config = TrainerConfig {
        mode: TrainMode::Sft,
        micro_batch_size: TRAIN_BATCH,
        optim: OptimConfig {
            lr: 1e-4,
            ..OptimConfig::default()
        },
        ..TrainerConfig::default()
    };
    let mut trainer = Trainer::new(
        Qwen2ForCausalLM::load(&dir, tch::Device::Cpu, ModelDtype::F32).unwrap(),
        None,
        train_config,
    )
    .unwrap();
    let ours_train = median(|| {
        let start = Instant::now();
        trainer.step(&batch).unwrap();
        (TRAIN_BATCH * (PROMPT + NEW)) as f64 / start.elapsed().as_secs_f64()
    });

    let venv = std::env::var("UNIAGENT_TORCH_VENV")
        .expect("source scripts/env/torch.sh first (UNIAGENT_TORCH_VENV)");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tch_policy_torch.py");
    let args = json!({
        "model_dir": dir, "prompts": prompts, "gen_batch": GEN_BATCH, "train_batch": TRAIN_BATCH,
        "new": NEW, "iters": ITERS, "threads": threads,
    });
    let output = Command::new(std::path::Path::new(&venv).join("bin/python"))
        .arg(script)
        .arg(args.to_string())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "baseline failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let torch: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let torch_gen = torch["gen_tokens_per_s"].as_f64().unwrap();
    let torch_train = torch["train_tokens_per_s"].as_f64().unwrap();
    println!("tch_policy (CPU, float32, {threads} threads; hidden 256, 4 layers, vocab 8192)");
    println!(
        "generation  {GEN_BATCH}x({PROMPT}+{NEW}) greedy: ours {ours_gen:9.1} tok/s   pytorch {torch_gen:9.1} tok/s   ratio {:.2}",
        ours_gen / torch_gen
    );
    println!(
        "train step  {TRAIN_BATCH}x{} SFT+AdamW:       ours {ours_train:9.1} tok/s   pytorch {torch_train:9.1} tok/s   ratio {:.2}",
        PROMPT + NEW,
        ours_train / torch_train
    );
}
