//! The closed loop in CI: `quickstart --quick` (synchronous mode, fixed seed) must improve
//! held-out success over the SFT-only policy, give the same numbers when run again with the
//! same seed, write its trajectories, metrics and learning curve, and export a policy that
//! `--model-dir` loads back.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The sandbox server the quickstart's host sandboxes run: built next to the test binaries by
/// `cargo test --workspace`.
fn sandbox_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_quickstart"));
    let dir = exe.parent().unwrap().to_path_buf();
    assert!(
        dir.join("uniagent-sandbox").exists(),
        "{} has no uniagent-sandbox; build it: cargo build -p uniagent-envs --bin uniagent-sandbox",
        dir.display()
    );
    dir
}

/// Runs the quickstart with `args` into `out`; returns the summary.
fn run(out: &Path, args: &[&str]) -> Value {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![sandbox_dir()];
    paths.extend(std::env::split_paths(&path));
    let run = Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .args(args)
        .arg("--out")
        .arg(out)
        .env("PATH", std::env::join_paths(paths).unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "quickstart failed: {stderr}");
    serde_json::from_slice(&run.stdout).unwrap()
}

/// One `--quick --mode sync` run shared by the tests of this binary (it takes a minute or two).
fn quick_run() -> &'static (tempfile::TempDir, Value) {
    static RUN: OnceLock<(tempfile::TempDir, Value)> = OnceLock::new();
    RUN.get_or_init(|| {
        let out = tempfile::tempdir().unwrap();
        let summary = run(out.path(), &["--quick", "--mode", "sync"]);
        (out, summary)
    })
}

/// The summary and per-step metrics without the fields that measure time, and without the
/// trainer/rollout logprob comparison, whose ~1e-6 residue is the float rounding of whichever
/// requests the engine happened to decode together (checked on its own below).
fn numbers(out: &Path, summary: &Value) -> (Value, Value) {
    let skip = [
        "logprob_max_abs_diff",
        "importance_ratio",
        "wall_s",
        "rl_wall_s",
        "trainer_idle_ratio",
        "rollout_idle_ratio",
        "tokens_per_s",
        "rollout_wait_s",
        "train_s",
    ];
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(o) = &mut v {
            for k in skip {
                o.remove(k);
            }
        }
        v
    };
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    let steps = metrics["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(strip)
        .collect();
    (strip(summary), Value::Array(steps))
}

#[test]
fn quick_run_improves_held_out_success_over_sft_only() {
    let (_out, summary) = quick_run();
    let episodes = summary["held_out_tasks"].as_u64().unwrap();
    assert!(episodes >= 64, "too few held-out episodes: {summary}");
    let sft = summary["sft_only_success"].as_f64().unwrap();
    let rl = summary["rl_success"].as_f64().unwrap();
    let sft_reward = summary["sft_only_reward"].as_f64().unwrap();
    let rl_reward = summary["rl_reward"].as_f64().unwrap();
    // The SFT policy is imperfect, so there is something to learn ...
    assert!(
        sft < 0.9,
        "the SFT-only policy leaves nothing to learn: {summary}"
    );
    // ... and RL learns it: a margin of several episodes, not a tie broken by one.
    assert!(
        rl >= sft + 0.05,
        "RL did not improve held-out success by 5 points: {summary}"
    );
    assert!(
        rl_reward > sft_reward,
        "RL did not improve held-out reward: {summary}"
    );
}

/// Same seed, same numbers: a second synchronous run reproduces every metric that is not a
/// time measurement (held-out successes, rewards, losses, gradient norms, token counts).
#[test]
fn quick_runs_with_the_same_seed_give_the_same_numbers() {
    let (first_out, first) = quick_run();
    let second_out = tempfile::tempdir().unwrap();
    let second = run(second_out.path(), &["--quick", "--mode", "sync"]);
    let a = numbers(first_out.path(), first);
    let b = numbers(second_out.path(), &second);
    assert_eq!(a.0, b.0, "summaries differ");
    assert_eq!(a.1, b.1, "per-step metrics differ");
}

/// The pipeline's mechanics: trajectories of every phase on disk, the weight version of every
/// sampled token recorded (one per mask-1 token; in sync mode all from the current weights),
/// the trainer's log-probs equal to the rollout's, one metrics row per RL step, and a PNG
/// learning curve.
#[test]
fn quick_run_writes_trajectories_with_weight_versions_and_metrics() {
    let (out, summary) = quick_run();
    assert_eq!(summary["mode"], "sync");
    // Every output is there: one JSONL line per trajectory, one CSV row per RL step.
    let jsonl = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for phase in ["demonstration", "eval", "rl"] {
        assert!(
            lines.iter().any(|t| t["phase"] == phase),
            "no {phase} trajectory"
        );
    }
    let demos: Vec<&Value> = lines
        .iter()
        .filter(|t| t["phase"] == "demonstration")
        .collect();
    assert!(demos.iter().all(|t| t["reward"]["success"] == true));
    for t in lines.iter().filter(|t| t["phase"] == "rl") {
        let sampled = t["response_mask"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m.as_u64() == Some(1))
            .count();
        let versions = t["weight_versions"].as_array().unwrap();
        // Turns cut by the budget are masked out, so at least one version per kept token.
        assert!(versions.len() >= sampled, "{t}");
        let step = t["step"].as_u64().unwrap();
        assert!(versions.iter().all(|v| v.as_u64() == Some(step)), "{t}");
    }
    let csv = std::fs::read_to_string(out.path().join("metrics.csv")).unwrap();
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("metrics.json")).unwrap())
            .unwrap();
    let steps = metrics["steps"].as_array().unwrap();
    assert_eq!(csv.lines().count(), steps.len() + 1);
    // In sync mode the engine holds the trainer's weights: the trainer sees the sampled tokens
    // with the logprobs the engine reported (importance ratio 1).
    for s in steps {
        let diff = s["logprob_max_abs_diff"].as_f64().unwrap();
        assert!(diff < 1e-3, "trainer and rollout logprobs differ: {s}");
        let ratio = s["importance_ratio"].as_f64().unwrap();
        assert!((ratio - 1.0).abs() < 1e-3, "importance ratio off: {s}");
    }
    // A PNG: signature, then the IHDR chunk with the image size.
    let png = std::fs::read(out.path().join("learning_curve.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (640, 400));
    assert!(png.ends_with(b"IEND\xae\x42\x60\x82"));
}

/// `--model-dir` runs the same pipeline on a Hugging Face directory: the policy the quick run
/// exported (config.json, model.safetensors, tokenizer.json, tokenizer_config.json with the
/// chat template), evaluated without further training on the same held-out tasks, succeeds
/// exactly as often as it did at the end of the quick run.
#[test]
fn model_dir_loads_the_exported_policy_and_runs_the_pipeline() {
    let (quick_out, quick) = quick_run();
    let policy = quick_out.path().join("policy");
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(policy.join(file).exists(), "the export has no {file}");
    }
    let out = tempfile::tempdir().unwrap();
    let config = out.path().join("tiny.toml");
    let eval_tasks = quick["held_out_tasks"].as_u64().unwrap();
    std::fs::write(
        &config,
        format!("sft_tasks = 4\nsft_steps = 0\nrl_steps = 0\neval_tasks = {eval_tasks}\n"),
    )
    .unwrap();
    let run_out = out.path().join("run");
    let summary = run(
        &run_out,
        &[
            "--config",
            config.to_str().unwrap(),
            "--model-dir",
            policy.to_str().unwrap(),
        ],
    );
    assert_eq!(
        summary["sft_only_success"], quick["rl_success"],
        "the reloaded policy does not behave as the trained one: {summary} vs {quick}"
    );
    assert!(run_out.join("policy").join("model.safetensors").exists());
}
