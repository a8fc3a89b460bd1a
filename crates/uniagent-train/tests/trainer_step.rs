//! The trainer on the tiny-qwen2 fixture: SFT learns, micro-batching keeps the gradient, AdamW
//! groups, clipping, KL to a frozen reference, checkpoints that transformers loads.
#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a panic fails the test

mod common;

use serde_json::Map;
use tch::{Kind, Tensor};
use uniagent_core::rollout::AgentLoopMetrics;
use uniagent_core::{AgentLoopOutput, GenerateRequest, SamplingParams};
use uniagent_train::generate::generate_batch;
use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};
use uniagent_train::rl::{
    grpo_advantages, token_level_rewards, Groups, KlEstimator, KlKind, LossAggMode, PolicyLossMode,
    GRPO_EPSILON,
};
use uniagent_train::trainer::{
    KlLossConfig, OldLogProbSource, OptimConfig, RlObjective, TrainBatch, TrainMode, Trainer,
    TrainerConfig,
};

/// Four rollouts of two prompts (two per group), with a mask-0 "observation" token in the
/// middle of each response and rewards 1/0 within each group.
fn rollouts(model: &Qwen2ForCausalLM) -> (Vec<AgentLoopOutput>, Vec<String>) {
    let prompts = [
        vec![151644u32, 872, 198, 9707, 1879],
        vec![9707, 11, 1246, 525],
    ];
    let mut rows = Vec::new();
    let mut uids = Vec::new();
    for (p, prompt) in prompts.iter().enumerate() {
        for k in 0..2u64 {
            let sampling = SamplingParams {
                seed: Some(10 * p as u64 + k),
                ..SamplingParams::default()
            };
            let out = generate_batch(
                model,
                &[GenerateRequest::new(
                    prompt.clone(),
                    sampling,
                    6 + k as usize,
                )],
                None,
            )
            .unwrap()
            .remove(0);
            let mut ids = out.token_ids.clone();
            let mut mask = vec![1u8; ids.len()];
            let mut logprobs = out.logprobs.clone().unwrap();
            ids.insert(3, 198);
            mask.insert(3, 0);
            logprobs.insert(3, 0.0);
            // Off-policy rollout logprobs, so that ratios differ from 1 and clipping happens.
            for (t, lp) in logprobs.iter_mut().enumerate() {
                if mask[t] == 1 {
                    *lp += if t % 2 == 0 { 0.3 } else { -0.25 };
                }
            }
            rows.push(AgentLoopOutput {
                prompt_ids: prompt.clone(),
                response_ids: ids,
                response_mask: mask,
                response_logprobs: Some(logprobs),
                weight_versions: None,
                reward_score: Some(if k == 0 { 1.0 } else { 0.0 }),
                num_turns: 2,
                metrics: AgentLoopMetrics::default(),
                extra_fields: Map::new(),
                token_sources: None,
                rerender_ids: None,
            });
            uids.push(format!("prompt-{p}"));
        }
    }
    (rows, uids)
}

fn rl_config(agg: LossAggMode, loss_mode: PolicyLossMode, micro: usize) -> TrainerConfig {
    TrainerConfig {
        mode: TrainMode::Rl(RlObjective {
            loss_mode,
            agg,
            entropy_coeff: 0.01,
            ..RlObjective::default()
        }),
        micro_batch_size: micro,
        old_log_prob: OldLogProbSource::Rollout,
        ..TrainerConfig::default()
    }
}

fn grads_of(config: TrainerConfig, batch: &TrainBatch) -> (Vec<(String, Tensor)>, f64) {
    let mut trainer = Trainer::new(common::tiny_model(), None, config).unwrap();
    let metrics = trainer.accumulate_gradients(batch).unwrap();
    (trainer.gradients(), metrics.loss)
}

#[test]
fn micro_batching_does_not_change_the_gradient() {
    let (rows, uids) = rollouts(&common::tiny_model());
    let batch = TrainBatch::with_grpo(rows, &uids, true).unwrap();
    for (agg, mode) in [
        (LossAggMode::TokenMean, PolicyLossMode::Vanilla),
        (LossAggMode::SeqMeanTokenMean, PolicyLossMode::Gspo),
        (LossAggMode::SeqMeanTokenSumNorm, PolicyLossMode::Cispo),
    ] {
        let (full, full_loss) = grads_of(rl_config(agg, mode, 4), &batch);
        let (split, split_loss) = grads_of(rl_config(agg, mode, 1), &batch);
        let (three, _) = grads_of(rl_config(agg, mode, 3), &batch);
        assert!(
            (full_loss - split_loss).abs() < 1e-6,
            "{agg}: loss {full_loss} vs {split_loss}"
        );
        assert_eq!(full.len(), split.len());
        let mut total = 0.0;
        for ((name, a), ((_, b), (_, c))) in full.iter().zip(split.iter().zip(&three)) {
            let scale = a.abs().max().double_value(&[]).max(1e-6);
            let d = (a - b)
                .abs()
                .max()
                .double_value(&[])
                .max((a - c).abs().max().double_value(&[]));
            assert!(
                d <= 1e-4 * scale + 1e-7,
                "{agg}/{mode}: gradient of {name} differs by {d} (scale {scale})"
            );
            total += a.abs().sum(Kind::Float).double_value(&[]);
        }
        assert!(total > 0.0, "{agg}/{mode}: the gradient must not be zero");
    }
}

/// verl's row-level GRPO advantages of `rows`, computed directly.
fn row_grpo(rows: &[AgentLoopOutput], uids: &[String]) -> Vec<Vec<f32>> {
    let width = rows.iter().map(|r| r.response_ids.len()).max().unwrap();
    let mut mask = Vec::new();
    for r in rows {
        let mut m: Vec<f32> = r.response_mask.iter().map(|&x| f32::from(x)).collect();
        m.resize(width, 0.0);
        mask.extend(m);
    }
    let mask = Tensor::from_slice(&mask).view([rows.len() as i64, width as i64]);
    let scores: Vec<f32> = rows
        .iter()
        .map(|r| r.reward_score.unwrap() as f32)
        .collect();
    let rewards = token_level_rewards(&Tensor::from_slice(&scores), &mask).unwrap();
    let adv = grpo_advantages(
        &rewards,
        &mask,
        &Groups::from_uids(uids),
        true,
        GRPO_EPSILON,
    )
    .unwrap();
    (0..rows.len() as i64)
        .map(|i| Vec::<f32>::try_from(adv.get(i)).unwrap())
        .collect()
}

#[test]
fn session_weighting_counts_a_forked_session_once() {
    let (rows, uids) = rollouts(&common::tiny_model());
    // One session per row: exactly verl's row-level advantages.
    let plain = TrainBatch::with_grpo(rows.clone(), &uids, true).unwrap();
    assert_eq!(plain.advantages.as_ref().unwrap(), &row_grpo(&rows, &uids));
    // Row 0's session forks into three identical chains: the group still has two members,
    // so the advantages are those of the unforked batch, each chain carrying a third.
    let mut forked = vec![rows[0].clone(), rows[0].clone()];
    forked.extend(rows.iter().cloned());
    let mut forked_uids = vec![uids[0].clone(), uids[0].clone()];
    forked_uids.extend(uids.iter().cloned());
    let mut sessions: Vec<String> = vec!["s0".into(); 3];
    sessions.extend((1..rows.len()).map(|i| format!("s{i}")));
    let batch = TrainBatch::with_grpo_sessions(forked, &forked_uids, &sessions, true).unwrap();
    let adv = batch.advantages.as_ref().unwrap();
    let unforked = plain.advantages.as_ref().unwrap();
    for chain in &adv[..3] {
        let third: Vec<f32> = unforked[0].iter().map(|a| a / 3.0).collect();
        assert_eq!(chain, &third);
    }
    assert_eq!(&adv[3..], &unforked[1..]);
    let err = TrainBatch::with_grpo_sessions(rows, &uids, &sessions, true).unwrap_err();
    assert!(err.to_string().contains("sessions"), "{err}");
}

#[test]
fn sft_steps_reduce_the_loss() {
    let (rows, _) = rollouts(&common::tiny_model());
    let config = TrainerConfig {
        mode: TrainMode::Sft,
        micro_batch_size: 2,
        optim: OptimConfig {
            lr: 1e-2,
            max_grad_norm: Some(1.0),
            ..OptimConfig::default()
        },
        ..TrainerConfig::default()
    };
    let mut trainer = Trainer::new(common::tiny_model(), None, config).unwrap();
    let batch = TrainBatch::sft(rows);
    let losses: Vec<f64> = (0..6).map(|_| trainer.step(&batch).unwrap().loss).collect();
    assert!(
        losses[0] > 5.0,
        "a random model should start with a high NLL: {losses:?}"
    );
    assert!(
        losses[5] < 0.8 * losses[0],
        "SFT did not reduce the loss: {losses:?}"
    );
    assert_eq!(trainer.steps_done(), 6);
}

#[test]
fn weight_decay_skips_norms_and_biases() {
    let (rows, uids) = rollouts(&common::tiny_model());
    let mut batch = TrainBatch::with_grpo(rows, &uids, true).unwrap();
    // Zero advantages: zero policy gradient, so AdamW's update is the decay alone.
    batch.advantages = Some(vec![vec![0.0; 16]; 4]);
    let config = TrainerConfig {
        mode: TrainMode::Rl(RlObjective::default()),
        optim: OptimConfig {
            lr: 0.1,
            weight_decay: 0.5,
            ..OptimConfig::default()
        },
        ..TrainerConfig::default()
    };
    let before = common::tiny_model();
    let mut trainer = Trainer::new(common::tiny_model(), None, config).unwrap();
    trainer.step(&batch).unwrap();
    let after = trainer.policy().var_store().variables();
    for (name, old) in before.var_store().variables() {
        let new = &after[&name];
        let expected = if name.ends_with("norm.weight") || name.ends_with(".bias") {
            old.shallow_clone()
        } else {
            &old * 0.95
        };
        let d = (new - expected).abs().max().double_value(&[]);
        assert!(d < 1e-6, "{name}: off by {d}");
    }
}

#[test]
fn gradient_norm_is_clipped() {
    let (rows, _) = rollouts(&common::tiny_model());
    let mut trainer = Trainer::new(
        common::tiny_model(),
        None,
        TrainerConfig {
            mode: TrainMode::Sft,
            optim: OptimConfig {
                max_grad_norm: Some(0.01),
                ..OptimConfig::default()
            },
            ..TrainerConfig::default()
        },
    )
    .unwrap();
    trainer
        .accumulate_gradients(&TrainBatch::sft(rows))
        .unwrap();
    let norm = |grads: Vec<(String, Tensor)>| {
        grads
            .iter()
            .map(|(_, g)| g.pow_tensor_scalar(2).sum(Kind::Double).double_value(&[]))
            .sum::<f64>()
            .sqrt()
    };
    let before = norm(trainer.gradients());
    let reported = trainer.clip_gradients();
    assert!((before - reported).abs() < 1e-6 * before.max(1.0));
    assert!(before > 0.01);
    assert!((norm(trainer.gradients()) - 0.01).abs() < 1e-6);
}

#[test]
fn kl_to_the_frozen_reference_starts_at_zero_and_grows() {
    let (rows, uids) = rollouts(&common::tiny_model());
    let batch = TrainBatch::with_grpo(rows, &uids, true).unwrap();
    let objective = RlObjective {
        kl: Some(KlLossConfig {
            coef: 0.1,
            estimator: KlEstimator::plain(KlKind::K3),
        }),
        ..RlObjective::default()
    };
    let config = TrainerConfig {
        mode: TrainMode::Rl(objective),
        optim: OptimConfig {
            lr: 1e-2,
            ..OptimConfig::default()
        },
        ..TrainerConfig::default()
    };
    assert!(
        Trainer::new(common::tiny_model(), None, config).is_err(),
        "KL without a reference must be refused"
    );
    let mut trainer =
        Trainer::new(common::tiny_model(), Some(common::tiny_model()), config).unwrap();
    let first = trainer.step(&batch).unwrap();
    let kl = first.kl.expect("a KL loss reports its KL");
    assert!(kl.abs() < 1e-7, "policy == reference at step 0: {kl}");
    let second = trainer.step(&batch).unwrap();
    let kl = second.kl.expect("a KL loss reports its KL");
    assert!(kl > 1e-6, "KL must grow once the policy moved: {kl}");
}

/// The policy's mean per-token entropy over the batch's mask-1 tokens, computed here from the
/// logits directly (softmax, `−Σ p log p`), to check the trainer's figure against.
fn direct_entropy(model: &Qwen2ForCausalLM, rows: &[AgentLoopOutput]) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    tch::no_grad(|| {
        for row in rows {
            let ids: Vec<i64> = row
                .prompt_ids
                .iter()
                .chain(&row.response_ids)
                .map(|&t| i64::from(t))
                .collect();
            let logits = model
                .forward(&Tensor::from_slice(&ids).view([1, -1]), None, None, None)
                .unwrap()
                .get(0)
                .to_kind(Kind::Double);
            let p = row.prompt_ids.len();
            for (t, &m) in row.response_mask.iter().enumerate() {
                if m == 1 {
                    let logp = logits.get((p + t - 1) as i64).log_softmax(-1, Kind::Double);
                    sum += -(logp.exp() * &logp).sum(Kind::Double).double_value(&[]);
                    n += 1;
                }
            }
        }
    });
    sum / n as f64
}

#[test]
fn entropy_is_measured_at_every_step_also_with_coefficient_zero() {
    let model = common::tiny_model();
    let (rows, uids) = rollouts(&model);
    let expected = direct_entropy(&model, &rows);
    let batch = TrainBatch::with_grpo(rows, &uids, true).unwrap();
    let config = |entropy_coeff: f64| TrainerConfig {
        mode: TrainMode::Rl(RlObjective {
            entropy_coeff,
            ..RlObjective::default()
        }),
        micro_batch_size: 1,
        old_log_prob: OldLogProbSource::Rollout,
        ..TrainerConfig::default()
    };
    let mut measured = Vec::new();
    let mut losses = Vec::new();
    for coeff in [0.0, 0.5] {
        let mut trainer = Trainer::new(common::tiny_model(), None, config(coeff)).unwrap();
        let m = trainer.accumulate_gradients(&batch).unwrap();
        let entropy = m
            .entropy
            .unwrap_or_else(|| panic!("no entropy with entropy_coeff = {coeff}"));
        // Token-mean aggregation over 4 micro-batches of one row = the batch's token mean.
        assert!(
            (entropy - expected).abs() < 1e-4 * expected.max(1.0),
            "coefficient {coeff}: trainer says {entropy}, the logits say {expected}"
        );
        // Nothing else was computed: no KL term, no rollout correction.
        assert_eq!((m.kl, m.correction), (None, None));
        measured.push(entropy);
        losses.push((m.loss, m.pg_loss));
    }
    assert!((measured[0] - measured[1]).abs() < 1e-9);
    // The coefficient decides only whether it enters the loss.
    let ((loss0, pg0), (loss1, pg1)) = (losses[0], losses[1]);
    assert!(
        (loss0 - pg0).abs() < 1e-9,
        "coefficient 0: loss is the pg loss"
    );
    assert!(
        (loss1 - (pg1 - 0.5 * measured[1])).abs() < 1e-5,
        "coefficient 0.5: {loss1} != {pg1} - 0.5 * {}",
        measured[1]
    );
    // SFT measures no entropy.
    let sft_config = TrainerConfig {
        mode: TrainMode::Sft,
        ..TrainerConfig::default()
    };
    let mut sft = Trainer::new(common::tiny_model(), None, sft_config).unwrap();
    let m = sft.step(&TrainBatch::sft(batch.rows.clone())).unwrap();
    assert_eq!((m.entropy, m.kl), (None, None));
}

#[test]
fn bad_batches_are_typed_errors() {
    let mut trainer = Trainer::new(common::tiny_model(), None, TrainerConfig::default()).unwrap();
    assert!(trainer.step(&TrainBatch::sft(vec![])).is_err());
    let (mut rows, _) = rollouts(&common::tiny_model());
    rows[0].response_mask.pop();
    assert!(trainer.step(&TrainBatch::sft(rows.clone())).is_err());
    rows[0].response_mask.push(1);
    let mut no_logprobs = rows.clone();
    no_logprobs[2].response_logprobs = None;
    let mut rollout_trainer = Trainer::new(
        common::tiny_model(),
        None,
        rl_config(LossAggMode::TokenMean, PolicyLossMode::Vanilla, 2),
    )
    .unwrap();
    assert!(rollout_trainer
        .step(&TrainBatch {
            rows: no_logprobs,
            advantages: None
        })
        .is_err());
    rows[1].response_ids[0] = 151_936;
    assert!(trainer.step(&TrainBatch::sft(rows)).is_err());
}

fn probe_logits(
    model: &Qwen2ForCausalLM,
    ids: &[i64],
    probes: &[i64],
) -> (Vec<f64>, Vec<i64>, Vec<Vec<f64>>) {
    let logits =
        tch::no_grad(|| model.forward(&Tensor::from_slice(ids).unsqueeze(0), None, None, None))
            .unwrap()
            .get(0);
    let lse: Vec<f64> = Vec::try_from(logits.logsumexp([-1], false).to_kind(Kind::Double)).unwrap();
    let argmax: Vec<i64> = Vec::try_from(logits.argmax(-1, false)).unwrap();
    let idx = Tensor::from_slice(probes);
    let probe: Vec<Vec<f64>> = (0..ids.len() as i64)
        .map(|t| Vec::try_from(logits.get(t).index_select(0, &idx).to_kind(Kind::Double)).unwrap())
        .collect();
    (lse, argmax, probe)
}

#[test]
fn checkpoints_load_back_here_and_in_transformers() {
    let (rows, _) = rollouts(&common::tiny_model());
    let config = TrainerConfig {
        mode: TrainMode::Sft,
        optim: OptimConfig {
            lr: 1e-2,
            ..OptimConfig::default()
        },
        ..TrainerConfig::default()
    };
    let mut trainer = Trainer::new(common::tiny_model(), None, config).unwrap();
    trainer.step(&TrainBatch::sft(rows)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    trainer.save_checkpoint(dir.path()).unwrap();
    let ids: Vec<i64> = vec![151644, 872, 198, 9707, 1879, 13];
    let probes: Vec<i64> = vec![0, 13, 198, 872, 1879, 9707, 151643, 151645, 151935];
    let ours = probe_logits(trainer.policy(), &ids, &probes);
    let original = probe_logits(&common::tiny_model(), &ids, &probes);
    assert_ne!(ours.2, original.2, "the step must have changed the weights");
    let reloaded = Qwen2ForCausalLM::load(dir.path(), tch::Device::Cpu, ModelDtype::F32).unwrap();
    assert_eq!(
        probe_logits(&reloaded, &ids, &probes),
        ours,
        "reloaded checkpoint must be bit-identical"
    );

    let Some(python) = common::torch_python() else {
        return;
    };
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/hf_logits.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(dir.path())
        .arg(serde_json::to_string(&ids).unwrap())
        .arg(serde_json::to_string(&probes).unwrap())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "transformers failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let hf: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for t in 0..ids.len() {
        let lse = hf["logsumexp"][t].as_f64().unwrap();
        assert!(
            (lse - ours.0[t]).abs() < 1e-4,
            "position {t}: logsumexp {lse} vs ours {}",
            ours.0[t]
        );
        assert_eq!(hf["argmax"][t].as_i64().unwrap(), ours.1[t]);
        for (k, v) in common::floats_of(&hf["probes"][t]).iter().enumerate() {
            assert!(
                (v - ours.2[t][k]).abs() < 1e-4,
                "position {t} probe {k}: {v} vs {}",
                ours.2[t][k]
            );
        }
    }
}
