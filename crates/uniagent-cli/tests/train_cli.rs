//! `uniagent train` end to end (feature `tch`): the shipped quickstart config at CI size
//! trains a from-scratch policy in real host sandboxes through the library pipeline; the
//! exported `policy/` is then evaluated by `uniagent run` with the same environment, and the
//! same seed gives the same numbers.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use common::{jsonl, repo_root, run_in, stderr};
use serde_json::Value;

const TRAIN: &str = "examples/configs/quickstart-train.yaml";

/// `uniagent train` of the shipped config at CI size with `sets` overrides; the summary.
fn train(out: &Path, sets: &[&str]) -> Value {
    let mut all = vec!["trainer.quick=true"];
    all.extend_from_slice(sets);
    train_with(out, &all)
}

/// `uniagent train` of the shipped config with exactly `sets` as overrides; the summary.
fn train_with(out: &Path, sets: &[&str]) -> Value {
    let out_arg = out.display().to_string();
    let mut args = vec!["train", TRAIN, "--out", &out_arg];
    for set in sets {
        args.extend(["--set", set]);
    }
    let o = run_in(&repo_root(), &args);
    assert_eq!(o.status.code(), Some(0), "train failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Starts `uniagent ARGS` writing to `out` and SIGKILLs it once its step-5 checkpoint is
/// complete.
fn kill_after_step_5(out: &Path, args: &[&str]) {
    let mut child = common::uniagent()
        .current_dir(repo_root())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let latest = out.join("checkpoints/latest");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1800);
    while !std::fs::read_to_string(&latest).is_ok_and(|s| s.trim() == "step-000005") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "train ended before step 5"
        );
        assert!(std::time::Instant::now() < deadline, "no step-5 checkpoint");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

fn quick_run() -> &'static (tempfile::TempDir, Value) {
    static RUN: OnceLock<(tempfile::TempDir, Value)> = OnceLock::new();
    RUN.get_or_init(|| {
        let out = tempfile::tempdir().unwrap();
        let summary = train(out.path(), &[]);
        (out, summary)
    })
}

#[test]
fn quick_train_improves_held_out_success_over_sft_only() {
    let (_, summary) = quick_run();
    assert_eq!(summary["held_out_tasks"], 64, "{summary}");
    let sft = summary["sft_only_success"].as_f64().unwrap();
    let rl = summary["rl_success"].as_f64().unwrap();
    assert!(
        sft < 0.9,
        "the SFT-only policy leaves nothing to learn: {summary}"
    );
    assert!(
        rl >= sft + 0.05,
        "RL did not improve held-out success by 5 points: {summary}"
    );
    assert!(
        summary["rl_reward"].as_f64() > summary["sft_only_reward"].as_f64(),
        "{summary}"
    );
}

#[test]
fn the_output_directory_has_what_interfaces_promise() {
    let (out, summary) = quick_run();
    let out = out.path();
    // summary.json: the run's counts next to the pipeline's figures.
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(&on_disk, summary);
    for key in [
        "tasks",
        "rollouts",
        "success_rate",
        "mean_reward",
        "exit_reasons",
    ] {
        assert!(
            summary.get(key).is_some(),
            "summary.json lacks {key}: {summary}"
        );
    }
    assert_eq!(summary["tasks"], 480);
    // One metrics line per RL step (12 at CI size).
    let metrics = jsonl(&out.join("metrics.jsonl"));
    let steps: Vec<u64> = metrics
        .iter()
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (1..=12).collect::<Vec<_>>());
    // Trajectories of every phase; RL ones carry a weight version per sampled token.
    let ts = jsonl(&out.join("trajectories.jsonl"));
    assert_eq!(ts.len() as u64, summary["rollouts"].as_u64().unwrap());
    let phase = |p: &str| ts.iter().filter(|t| t["phase"] == p).count();
    assert_eq!(phase("demonstration"), 96);
    assert_eq!(phase("rl"), 12 * 8 * 8);
    assert_eq!(phase("eval"), 64 * 3, "before RL, at step 6 and at step 12");
    let probes = summary["sft_probes"].as_array().unwrap();
    assert!(!probes.is_empty(), "{summary}");
    assert_eq!(phase("sft_probe"), 32 * probes.len());
    assert_eq!(
        probes.last().unwrap()[0],
        summary["sft_steps"],
        "the last probe is where SFT stopped"
    );
    for t in ts.iter().filter(|t| t["phase"] == "rl") {
        let mask = t["response_mask"].as_array().unwrap();
        let versions = t["weight_versions"].as_array().unwrap();
        assert_eq!(mask.len(), versions.len(), "{t}");
        for (m, v) in mask.iter().zip(versions) {
            assert_eq!(m == 1, !v.is_null(), "version where mask is {m}: {t}");
        }
        assert!(t.get("response_logprobs").is_some_and(Value::is_array));
    }
    // The report counts the RL rollouts; its curve is metrics.jsonl's per-step success and its
    // held-out gain runs from the evaluation before RL to the last one, as the summary says.
    let report = &summary["report"];
    assert_eq!(report["source"], "train", "{report}");
    assert_eq!(report["rollouts"], phase("rl") as u64, "{report}");
    let curve = report["training"]["curve"].as_array().unwrap();
    assert_eq!(curve.len(), metrics.len(), "{report}");
    for (point, m) in curve.iter().zip(&metrics) {
        assert_eq!(point["step"], m["step"]);
        let (ours, theirs) = (point["success_rate"].as_f64(), m["success_rate"].as_f64());
        assert!(
            (ours.unwrap() - theirs.unwrap()).abs() < 1e-12,
            "{point} vs {m}"
        );
    }
    let held = &report["training"]["held_out"];
    assert_eq!(
        (
            held["first"]["step"].as_u64(),
            held["last"]["step"].as_u64()
        ),
        (Some(0), Some(12))
    );
    let close = |a: &Value, b: &Value| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-12;
    assert!(
        close(&held["first"]["success_rate"], &summary["sft_only_success"]),
        "{held}"
    );
    assert!(
        close(&held["last"]["success_rate"], &summary["rl_success"]),
        "{held}"
    );
    // Entropy is measured at every step (entropy_coeff is 0 here); KL and rollout correction
    // are off, so their figures are absent rather than 0.
    for m in &metrics {
        assert!(m["entropy"].as_f64().is_some_and(|e| e > 0.0), "{m}");
        assert!(
            m.get("kl").is_none() && m.get("is_weight_mean").is_none(),
            "{m}"
        );
    }
    // The exported policy and the files of the run.
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(out.join("policy").join(f).exists(), "policy/{f} missing");
    }
    assert!(out.join("learning_curve.png").exists());
}

#[test]
fn the_exported_policy_is_evaluated_by_run_with_the_same_environment() {
    let (out, _) = quick_run();
    let eval_out = tempfile::tempdir().unwrap();
    let policy = format!("model.dir={}", out.path().join("policy").display());
    let eval_arg = eval_out.path().display().to_string();
    let o = run_in(
        &repo_root(),
        &[
            "run",
            "examples/configs/quickstart-eval.yaml",
            "--set",
            &policy,
            "--limit",
            "16",
            "--out",
            &eval_arg,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "run failed: {}", stderr(&o));
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["rollouts"], 16, "{summary}");
    let ts = jsonl(&eval_out.path().join("trajectories.jsonl"));
    assert_eq!(ts.len(), 16);
    for t in &ts {
        assert!(
            t["prompt_ids"].as_array().is_some_and(|p| !p.is_empty()),
            "{t}"
        );
        assert!(t["response_ids"].is_array(), "{t}");
    }
    // The policy solves held-out-like tasks as often as train's last evaluation says
    // (different tasks, so only roughly): more than nothing.
    assert!(summary["success_rate"].as_f64().unwrap() > 0.0, "{summary}");
}

/// The same seed gives the same numbers, also through a kill: the second run is SIGKILLed
/// once its step-5 checkpoint is complete, and rerunning the same command resumes it.
#[test]
fn a_killed_run_resumed_gives_the_numbers_of_an_uninterrupted_one() {
    let (first_out, first) = quick_run();
    let second_out = tempfile::tempdir().unwrap();
    let out_arg = second_out.path().display().to_string();
    kill_after_step_5(
        second_out.path(),
        &[
            "train",
            TRAIN,
            "--out",
            &out_arg,
            "--set",
            "trainer.quick=true",
        ],
    );
    let second = train(second_out.path(), &[]);
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(o) = &mut v {
            for k in [
                "wall_s",
                "wall_time",
                "rl_wall_s",
                "trainer_idle_ratio",
                "rollout_idle_ratio",
            ] {
                o.remove(k);
            }
            // The report's mean wall time per success is a wall-clock figure too.
            if let Some(Value::Object(per)) =
                o.get_mut("report").and_then(|r| r.get_mut("per_success"))
            {
                per.remove("wall_time_s");
            }
        }
        v
    };
    assert_eq!(strip(first), strip(&second), "summaries differ");
    let numbers = |dir: &Path| -> Vec<Value> {
        jsonl(&dir.join("metrics.jsonl"))
            .into_iter()
            .map(|m| {
                let mut m = m;
                if let Value::Object(o) = &mut m {
                    o.retain(|k, _| {
                        [
                            "step",
                            "mean_reward",
                            "success_rate",
                            "loss",
                            "grad_norm",
                            "held_out_success",
                        ]
                        .contains(&k.as_str())
                    });
                }
                m
            })
            .collect()
    };
    assert_eq!(numbers(first_out.path()), numbers(second_out.path()));
}

#[test]
fn a_seed_whose_fixed_length_warm_start_failed_reaches_the_target_and_learns() {
    // Seed 7 at a fixed 115 SFT steps started RL from 0 % held-out success (nothing for GRPO
    // to reinforce); the SFT target keeps it training until it solves unseen tasks.
    let out = tempfile::tempdir().unwrap();
    let summary = train(out.path(), &["trainer.seed=7"]);
    assert!(
        summary["sft_steps"].as_u64().unwrap() > 115,
        "seed 7 needed more than the minimum: {summary}"
    );
    let probes = summary["sft_probes"].as_array().unwrap();
    let last = probes.last().unwrap()[1].as_f64().unwrap();
    assert!(last >= 0.2, "SFT stopped below its target: {summary}");
    let sft = summary["sft_only_success"].as_f64().unwrap();
    let rl = summary["rl_success"].as_f64().unwrap();
    assert!(sft >= 0.1, "the warm start still failed: {summary}");
    // RL must help; the size of the gain is not asserted here. The run is deterministic on one
    // machine, but libtorch's float reductions differ by CPU: on an AMD EPYC without AVX-512
    // this seed gains 4.7 points (28.1 % → 32.8 %, 3 of 64 tasks), more elsewhere. The 5-point
    // bar stays on the default seed (`quick_train_improves_held_out_success_over_sft_only`).
    assert!(rl > sft, "RL did not improve held-out success: {summary}");
    assert!(
        summary["rl_reward"].as_f64() > summary["sft_only_reward"].as_f64(),
        "{summary}"
    );
}

#[test]
fn bad_trainer_sections_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("trainer.rl.loss_mode=ppo2", "trainer.rl.loss_mode"),
        ("trainer.rl.adv_estimator=gae", "trainer.rl.adv_estimator"),
        ("trainer.rl.clip_ratio_c=0.5", "rl.clip_ratio_c"),
        ("trainer.split.eval_tasks=480", "trainer.split.eval_tasks"),
        (
            "trainer.scratch.vocab_size=10",
            "trainer.scratch.vocab_size",
        ),
        ("trainer.bogus=1", "trainer.bogus"),
        ("trainer.sft.target.success=1.5", "sft.target.success"),
        ("model.type=openai", "model"),
    ];
    for (set, key) in cases {
        let o = run_in(
            &repo_root(),
            &[
                "train",
                TRAIN,
                "--dry-run",
                "--set",
                set,
                "--out",
                &dir.path().display().to_string(),
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{set}: {}", stderr(&o));
        assert!(stderr(&o).contains(key), "{set}: {}", stderr(&o));
    }
    let o = run_in(&repo_root(), &["train", TRAIN, "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("96 demonstrated, 416 trained on, 64 held out"),
        "{}",
        stderr(&o)
    );
}

/// Whether a `metrics.jsonl` key is a figure of the clock (`train_s`, `tokens_per_s`, ...),
/// which no two runs share.
fn is_clock_figure(key: &str) -> bool {
    key.ends_with("_s")
}

/// The deterministic async schedule (`rl.async.deterministic`) as the CI run of async RL:
/// with the knobs verl's fully-async recipe starts from (staleness threshold 0.5, a sync
/// every step) and decoupled PPO with token-level TIS. The schedule is exactly the formula's
/// (group `g` on sync `⌈(g + 1 − 12) / 8⌉`: 8 groups a step, 12 admitted per period), and a
/// run SIGKILLed after its step-5 checkpoint and resumed samples, scores and evaluates exactly
/// what an uninterrupted one does, so the same seed is the same run.
#[test]
fn deterministic_async_follows_its_schedule_and_resumes_exactly() {
    let sets = [
        "trainer.quick=true",
        "trainer.rl.mode=async",
        "trainer.rl.async.deterministic=true",
        "trainer.rl.correction.is.level=token",
        "trainer.rl.correction.is.upper=2.0",
    ];
    let first_out = tempfile::tempdir().unwrap();
    let first = train_with(first_out.path(), &sets);
    assert_eq!(first["mode"], "async", "{first}");
    assert_eq!(first["pipeline"]["deterministic"], true, "{first}");

    // The schedule: groups in draw order, each on the sync the formula gives it.
    let metrics = jsonl(&first_out.path().join("metrics.jsonl"));
    assert_eq!(metrics.len(), 12);
    let start = metrics[0]["schedule"][0]["version"].as_u64().unwrap();
    for m in &metrics {
        let step = m["step"].as_u64().unwrap() as usize;
        let groups = m["schedule"].as_array().unwrap();
        assert_eq!(groups.len(), 8, "{m}");
        for (i, g) in groups.iter().enumerate() {
            let index = (step - 1) * 8 + i;
            assert_eq!(g["group"], index, "step {step}: {m}");
            let sync = (index + 1).saturating_sub(12).div_ceil(8) as u64;
            assert_eq!(
                g["version"].as_u64(),
                Some(start + sync),
                "step {step}: {m}"
            );
        }
        // Trained at the version after `step - 1` syncs: staleness 1 from step 2 on.
        let stale = m["staleness"].as_u64().unwrap();
        assert_eq!(stale, u64::from(step > 1), "step {step}: {m}");
        // Per trained sample: at its group's staleness under the schedule (trained at version
        // `start + step - 1`); a group whose every sample was dropped leaves no entry. The
        // deterministic schedule never resumes a rollout on newer weights.
        let trained = start + step as u64 - 1;
        let expected: BTreeSet<u64> = groups
            .iter()
            .map(|g| trained - g["version"].as_u64().unwrap())
            .collect();
        let per_sample: BTreeSet<u64> = m["sample_staleness_hist"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.parse().unwrap())
            .collect();
        assert!(
            per_sample.is_subset(&expected) && per_sample.contains(&stale),
            "step {step}: {per_sample:?} vs {expected:?}: {m}"
        );
        assert_eq!(m["partial_resumes"], 0, "step {step}: {m}");
    }

    // Killed after the step-5 checkpoint, resumed: the same run.
    let second_out = tempfile::tempdir().unwrap();
    let out_arg = second_out.path().display().to_string();
    let mut args = vec!["train", TRAIN, "--out", &out_arg];
    for set in &sets {
        args.extend(["--set", set]);
    }
    kill_after_step_5(second_out.path(), &args);
    let second = train_with(second_out.path(), &sets);
    // Everything the steps record is the same, to the bit, but the clock's figures: with
    // rollout correction the loss reads the engine's logprobs, which a deterministic run
    // rescores alone (batch-invariant), so they do not depend on how the clock composed the
    // decode batches.
    let lines = |dir: &Path| jsonl(&dir.join("metrics.jsonl"));
    let (a, b) = (lines(first_out.path()), lines(second_out.path()));
    assert_eq!(a.len(), b.len());
    let timeless = |line: &Value| {
        let mut line = line.as_object().unwrap().clone();
        line.retain(|key, _| !is_clock_figure(key));
        line
    };
    for (x, y) in a.iter().zip(&b) {
        for key in [
            "loss",
            "grad_norm",
            "is_weight_mean",
            "schedule",
            "mean_reward",
        ] {
            assert!(x.get(key).is_some(), "{key} is not recorded: {x}");
        }
        assert_eq!(timeless(x), timeless(y), "{x}\nvs\n{y}");
    }
    // And so are the trained weights.
    let weights = |dir: &Path| std::fs::read(dir.join("policy/model.safetensors")).unwrap();
    assert!(
        weights(first_out.path()) == weights(second_out.path()),
        "the two runs trained different weights"
    );
    for key in ["sft_only_success", "rl_success", "rl_reward", "curve"] {
        assert_eq!(first[key], second[key], "{key}: {first} vs {second}");
    }
    // Async RL with this schedule still learns (deterministic on one machine; the size of
    // the gain differs by CPU, as libtorch's float reductions do).
    assert!(
        first["rl_success"].as_f64() > first["sft_only_success"].as_f64(),
        "{first}"
    );
}
