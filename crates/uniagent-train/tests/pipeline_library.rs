//! Training as a library, with a task family of its own (not the quickstart's): "repeat the
//! word" tasks answered with the `finish` tool, no sandbox, a reward that compares the answer
//! with the task's metadata. A from-scratch tokenizer and tiny Qwen2 policy go through the
//! pipeline's phases one by one: demonstrations through the real loop, SFT (held-out success
//! goes up), RL in sync mode, RL in fully-async mode, and the Hugging Face export that loads
//! back.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers

mod word_family;

use serde_json::{json, Value};
use uniagent_core::Task;
use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};
use uniagent_train::pipeline::{Mode, Pipeline, PipelineConfig, TaskSource};
use word_family::{codec_and_policy, demonstrator, metrics, spec, task, tasks, WORDS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_trains_a_policy_on_their_own_task_family() {
    let (codec, policy) = codec_and_policy(3);
    let vocab = policy.config().vocab_size;
    let spec = spec(codec.clone());
    let yaml = "seed: 3\nsft:\n  steps: 80\n  batch_size: 12\n  lr: 0.003\n\
                rl:\n  steps: 2\n  tasks_per_step: 3\n  group_size: 4\n  lr: 0.0005\n  eval_every: 0\n";
    let mut config = PipelineConfig::from_yaml_str(yaml).unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut pipeline = Pipeline::new(policy, spec.clone(), config.clone(), out.path()).unwrap();

    let held_out: Vec<Task> = WORDS.iter().map(|w| task(format!("eval-{w}"), w)).collect();
    let before = pipeline.evaluate(&held_out, 0).await.unwrap();
    // Demonstrations through the real loop (the reward says they succeed), then SFT.
    let sft_tasks = tasks("sft", 12);
    let demonstrator = demonstrator(codec.clone(), 12);
    let demos = pipeline
        .demonstrations(demonstrator, sft_tasks)
        .await
        .unwrap();
    let rows: Vec<_> = demos.into_iter().map(|t| t.output).collect();
    // A script has no distribution: its sampled tokens carry no logprobs (absent, not zeros),
    // in memory and in trajectories.jsonl.
    for r in &rows {
        assert!(
            r.response_mask.contains(&1) && r.response_logprobs.is_none(),
            "{r:?}"
        );
    }
    let written = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let records: Vec<Value> = written
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    for r in &records {
        let violations = uniagent_core::testing::trajectory_record_violations(r);
        assert!(violations.is_empty(), "{violations:?} in {r}");
    }
    let demonstrations: Vec<Value> = records
        .into_iter()
        .filter(|v| v["phase"] == "demonstration")
        .collect();
    assert_eq!(demonstrations.len(), 12);
    for v in &demonstrations {
        assert!(v.get("response_logprobs").is_none(), "{v}");
    }
    let losses = pipeline.sft(&rows).unwrap();
    assert!(
        losses.last().unwrap() < &(losses[0] * 0.5),
        "SFT did not learn: {losses:?}"
    );
    let after = pipeline.evaluate(&held_out, 0).await.unwrap();
    assert!(
        after.success > before.success + 0.3,
        "SFT did not raise held-out success: {before:?} -> {after:?}"
    );

    // RL, synchronous: one metrics line per step, fresh samples, ratio 1.
    let rl_tasks = tasks("rl", 30);
    let rl = pipeline
        .rl(TaskSource::new(rl_tasks.clone(), 5), &held_out)
        .await
        .unwrap();
    assert_eq!(rl.steps.len(), 2);
    let lines = metrics(out.path());
    assert_eq!(lines.len(), 2, "one metrics.jsonl line per step");
    for (line, s) in lines.iter().zip(&rl.steps) {
        assert_eq!((line.step, line.sampled_tokens), (s.step, s.sampled_tokens));
        assert_eq!((line.loss, line.grad_norm), (s.loss, s.grad_norm));
    }
    // Honest metrics: entropy is measured with entropy_coeff 0; there is no KL term and no
    // rollout correction, so their figures are absent from the lines, not 0.
    let raw = std::fs::read_to_string(out.path().join("metrics.jsonl")).unwrap();
    for line in raw.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v["entropy"].as_f64().is_some_and(|e| e > 0.0), "{v}");
        for absent in [
            "kl",
            "is_weight_mean",
            "is_weight_max",
            "is_fraction_high",
            "rs_rejected_tokens",
            "rs_rejected_sequences",
        ] {
            assert!(v.get(absent).is_none(), "{absent} in {v}");
        }
    }
    for s in &rl.steps {
        assert_eq!(s.staleness, 0, "{s:?}");
        assert!((s.importance_ratio.unwrap() - 1.0).abs() < 1e-3, "{s:?}");
        assert!(
            s.grad_norm.unwrap().is_finite() && s.sampled_tokens > 0,
            "{s:?}"
        );
        assert_eq!(s.exit_reasons.values().sum::<usize>(), 12);
    }
    assert_eq!(
        rl.curve.len(),
        1,
        "held-out evaluated after the last step only"
    );

    // The export loads back, with eos in both configs.
    let export = out.path().join("policy");
    pipeline.export(&export, None).unwrap();
    let loaded = Qwen2ForCausalLM::load(&export, tch::Device::Cpu, ModelDtype::F32).unwrap();
    assert_eq!(loaded.config().vocab_size, vocab);
    let generation: Value = serde_json::from_str(
        &std::fs::read_to_string(export.join("generation_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(generation["eos_token_id"], json!(codec.eos_token_id()));

    // RL, fully async, on a fresh pipeline from the exported policy: the rollouter runs ahead
    // (bounded by the staleness threshold) and every step's staleness is measured from the
    // tokens' weight versions.
    config.rl.mode = Mode::Async;
    config.rl.steps = 3;
    config.rl.r#async.staleness_threshold = 1.0;
    let out2 = tempfile::tempdir().unwrap();
    // The engine's copy on a device libtorch does not have is refused before anything runs;
    // on the CPU it is placed there explicitly (the path a second GPU takes).
    config.generation_device = Some("cuda:64".into());
    let elsewhere = tempfile::tempdir().unwrap();
    let Err(refused) = Pipeline::new(
        loaded.try_clone().unwrap(),
        spec.clone(),
        config.clone(),
        elsewhere.path(),
    ) else {
        panic!("generation_device cuda:64 was accepted");
    };
    assert!(
        refused.to_string().contains("generation_device `cuda:64`"),
        "{refused}"
    );
    config.generation_device = Some("cpu".into());
    let mut pipeline = Pipeline::new(loaded, spec, config, out2.path()).unwrap();
    let rl = pipeline
        .rl(TaskSource::new(rl_tasks, 5), &held_out)
        .await
        .unwrap();
    assert_eq!(rl.steps.len(), 3);
    for s in &rl.steps {
        let tokens: usize = s.staleness_hist.values().sum();
        assert!(tokens > 0, "no staleness measured: {s:?}");
        // Per trained sample: one entry per sample that sampled a token, never older than
        // its oldest token, and every resume belongs to a resumed sample.
        let samples: usize = s.sample_staleness_hist.values().sum();
        assert!(samples > 0 && samples <= tokens, "{s:?}");
        assert_eq!(
            s.sample_staleness_hist.keys().max(),
            s.staleness_hist.keys().max(),
            "{s:?}"
        );
        assert!(s.resumed_samples <= samples && s.resumed_samples <= s.partial_resumes);
        assert_eq!(s.resumed_samples == 0, s.partial_resumes == 0, "{s:?}");
        // At most (1 + threshold) periods ahead of the trainer.
        assert!(s.staleness <= 2, "{s:?}");
    }
    assert!(rl.rollout_idle_ratio >= 0.0 && rl.trainer_idle_ratio <= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_without_a_reward_are_refused_before_any_runs() {
    use uniagent_core::runner::{RolloutPhase, RolloutSource};
    let (codec, _policy) = codec_and_policy(3);
    let mut spec = spec(codec.clone());
    spec.parts.reward = None;
    let err = spec
        .run(
            demonstrator(codec, 2),
            RolloutPhase::greedy(tasks("sft", 2), 2),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("environment `word-family` has no reward"),
        "{err}"
    );
}
