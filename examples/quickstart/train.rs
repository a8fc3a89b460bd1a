//! The closed loop: tokenizer + policy, SFT warm start on demonstrations, held-out
//! evaluation, RL on the policy's own rollouts, metrics and trajectories on disk.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use uniagent_core::agent::Trajectory;
use uniagent_core::{AgentLoopOutput, Error, Result, Task, TokenGenerator};
use uniagent_envs::HostConfig;
use uniagent_train::generate::{EngineConfig, TchEngine};
use uniagent_train::model::Qwen2ForCausalLM;
use uniagent_train::rl::PolicyLossMode;
use uniagent_train::tch::{self, Device, Kind, Tensor};
use uniagent_train::trainer::{
    OptimConfig, RlObjective, TrainBatch, TrainMode, Trainer, TrainerConfig,
};

use crate::config::QuickstartConfig;
use crate::pipeline::Rollouter;
use crate::rollout::{demonstration, run_rollouts, Demonstrator, RolloutSettings, Seeded};
use crate::task::FileQuestion;
use uniagent_train::scratch::{
    load_hf, save_tokenizer, scratch_codec, scratch_model, train_tokenizer,
};

fn io(context: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(context.to_owned(), e)
}

/// Tasks `prefix-0..n` drawn from `rng`.
fn tasks(prefix: &str, n: usize, files: usize, rng: &mut fastrand::Rng) -> Vec<FileQuestion> {
    (0..n)
        .map(|i| FileQuestion::generate(format!("{prefix}-{i}"), files, rng))
        .collect()
}

/// The tokenizer's training text: questions, demonstrations and observations of many tasks.
fn corpus(files: usize, rng: &mut fastrand::Rng) -> Vec<String> {
    let mut lines = Vec::new();
    for t in tasks("corpus", 400, files, rng) {
        lines.push(format!("<|im_start|>user\n{}<|im_end|>\n", t.question()));
        lines.push(format!(
            "<|im_start|>assistant\n{}<|im_end|>\n",
            demonstration(&t, 0)
        ));
        lines.push(format!("<|im_start|>tool\n{}\n<|im_end|>\n", t.answer()));
        lines.push(format!(
            "<|im_start|>assistant\n{}<|im_end|>\n",
            demonstration(&t, 1)
        ));
    }
    lines
}

/// A copy of `model` (same architecture, device and dtype; same weights).
fn clone_model(model: &Qwen2ForCausalLM) -> Result<Qwen2ForCausalLM> {
    let mut copy = Qwen2ForCausalLM::new(model.config().clone(), model.device(), model.dtype())?;
    copy.copy_weights_from(model)?;
    Ok(copy)
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len as u64);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{elapsed:>4}} {what:<10} [{{bar:30}}] {{pos}}/{{len}} {{msg}}"
    )) {
        pb.set_style(style);
    }
    pb
}

/// Mean reward of trajectories (missing = 0).
fn mean_reward(ts: &[Trajectory]) -> f64 {
    ts.iter()
        .map(|t| t.output.reward_score.unwrap_or(0.0))
        .sum::<f64>()
        / ts.len().max(1) as f64
}

/// Mean absolute advantage over the rows of a GRPO batch (per row, its first token's).
fn mean_abs_advantage(batch: &TrainBatch) -> f64 {
    let Some(adv) = &batch.advantages else {
        return 0.0;
    };
    let firsts: Vec<f64> = adv
        .iter()
        .filter_map(|a| a.iter().find(|x| **x != 0.0).map(|x| f64::from(x.abs())))
        .collect();
    firsts.iter().sum::<f64>() / adv.len().max(1) as f64
}

/// Success rate of trajectories.
fn success(ts: &[Trajectory]) -> f64 {
    if ts.is_empty() {
        return 0.0;
    }
    ts.iter().filter(|t| t.is_success()).count() as f64 / ts.len() as f64
}

fn exit_reasons(ts: &[Trajectory]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for t in ts {
        *m.entry(format!("{:?}", t.exit_reason)).or_insert(0) += 1;
    }
    m
}

/// How far the trainer's view of the sampled tokens is from the rollout's: for every mask-1
/// response token, `log_softmax(policy(prompt ++ response))` at the position that predicts it
/// (temperature 1, as the engine reports) minus the logprob the engine recorded. Returns the
/// largest absolute difference and the mean importance ratio `exp(Δ)`; with the engine holding
/// the trainer's weights both must be ~0 and ~1, or positions, masks or logprobs are wrong.
fn logprob_check(model: &Qwen2ForCausalLM, rows: &[&AgentLoopOutput]) -> Result<(f64, f64)> {
    let (mut max_diff, mut ratio_sum, mut n) = (0.0f64, 0.0f64, 0usize);
    for row in rows {
        let Some(rollout) = row.response_logprobs.as_deref() else {
            continue;
        };
        let sampled: Vec<usize> = (0..row.response_ids.len())
            .filter(|&t| row.response_mask[t] != 0)
            .collect();
        if sampled.is_empty() {
            continue;
        }
        let p = row.prompt_ids.len();
        let ids: Vec<i64> = row
            .prompt_ids
            .iter()
            .chain(&row.response_ids)
            .map(|&t| i64::from(t))
            .collect();
        let positions: Vec<i64> = sampled.iter().map(|&t| (p + t - 1) as i64).collect();
        let targets: Vec<i64> = sampled
            .iter()
            .map(|&t| i64::from(row.response_ids[t]))
            .collect();
        let device = model.device();
        let trainer: Vec<f32> = tch::no_grad(|| -> Result<Vec<f32>> {
            let input = Tensor::from_slice(&ids).view([1, -1]).to_device(device);
            let logits = model.forward(&input, None, None, None)?.get(0);
            let picked = logits.index_select(0, &Tensor::from_slice(&positions).to_device(device));
            let logp = picked
                .to_kind(Kind::Float)
                .log_softmax(-1, Kind::Float)
                .gather(
                    1,
                    &Tensor::from_slice(&targets).to_device(device).unsqueeze(1),
                    false,
                )
                .squeeze_dim(1)
                .to_device(Device::Cpu);
            Vec::<f32>::try_from(logp)
                .map_err(|e| Error::internal(format!("reading logprobs: {e}")))
        })?;
        for (k, &t) in sampled.iter().enumerate() {
            let diff = f64::from(trainer[k]) - f64::from(rollout.get(t).copied().unwrap_or(0.0));
            max_diff = max_diff.max(diff.abs());
            ratio_sum += diff.exp();
            n += 1;
        }
    }
    Ok((max_diff, ratio_sum / n.max(1) as f64))
}

/// Share of GRPO groups (rows with the same task) whose rewards differ: only those carry a
/// learning signal.
fn mixed_groups(ts: &[&Trajectory]) -> f64 {
    let mut groups: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for t in ts {
        let r = t.output.reward_score.unwrap_or(0.0);
        let e = groups.entry(t.task_id.as_str()).or_insert((r, r));
        e.0 = e.0.min(r);
        e.1 = e.1.max(r);
    }
    let mixed = groups.values().filter(|(lo, hi)| hi > lo).count();
    mixed as f64 / groups.len().max(1) as f64
}

/// `learning_curve.png`: held-out success at every evaluation (red, with points) and the
/// success rate of each RL step's rollouts (blue), from step 0 (SFT only) to the last step;
/// the y axis runs from 0 to 1 with grey lines every 0.25. No text, so no font is needed.
fn plot_curve(
    path: &Path,
    held_out: &[(usize, f64)],
    train: &[(usize, f64)],
    steps: usize,
) -> Result<()> {
    use plotters::prelude::*;
    let err =
        |e: &dyn std::fmt::Display| Error::internal(format!("drawing {}: {e}", path.display()));
    let x_max = steps.max(1) as f64;
    let root = BitMapBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .margin(24)
        .build_cartesian_2d(0f64..x_max, 0f64..1f64)
        .map_err(|e| err(&e))?;
    let grey = RGBColor(210, 210, 210);
    for k in 0..=4 {
        let y = f64::from(k) / 4.0;
        chart
            .draw_series(LineSeries::new(vec![(0.0, y), (x_max, y)], &grey))
            .map_err(|e| err(&e))?;
    }
    chart
        .draw_series(LineSeries::new(vec![(0.0, 0.0), (0.0, 1.0)], &BLACK))
        .map_err(|e| err(&e))?;
    let blue = RGBColor(90, 120, 230);
    chart
        .draw_series(LineSeries::new(
            train.iter().map(|&(s, r)| (s as f64, r)),
            &blue,
        ))
        .map_err(|e| err(&e))?;
    let red = RGBColor(220, 40, 40);
    chart
        .draw_series(LineSeries::new(
            held_out.iter().map(|&(s, r)| (s as f64, r)),
            red.stroke_width(3),
        ))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(
            held_out
                .iter()
                .map(|&(s, r)| Circle::new((s as f64, r), 5, red.filled())),
        )
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Appends trajectories to the JSONL file, tagged with the phase, the step and the weight
/// version of every sampled token (`weight_versions`, from `versions`).
fn write_jsonl(
    file: &mut std::fs::File,
    phase: &str,
    step: usize,
    ts: &[Trajectory],
    versions: &dyn Fn(&str) -> Vec<u64>,
) -> Result<()> {
    for t in ts {
        let mut v = serde_json::to_value(t).map_err(|e| Error::internal(e.to_string()))?;
        if let Value::Object(o) = &mut v {
            o.insert("phase".into(), json!(phase));
            o.insert("step".into(), json!(step));
            o.insert("weight_versions".into(), json!(versions(&t.id)));
        }
        writeln!(file, "{v}").map_err(io("writing trajectories.jsonl"))?;
    }
    Ok(())
}

/// Runs the whole quickstart and returns the summary as JSON text.
pub async fn run(
    config: &QuickstartConfig,
    out: &Path,
    model_dir: Option<&Path>,
) -> Result<String> {
    let started = Instant::now();
    std::fs::create_dir_all(out).map_err(io("creating the output directory"))?;
    let toml_text = toml::to_string(config).map_err(|e| Error::internal(e.to_string()))?;
    std::fs::write(out.join("config.toml"), toml_text).map_err(io("writing config.toml"))?;
    let mut jsonl = std::fs::File::create(out.join("trajectories.jsonl"))
        .map_err(io("creating trajectories.jsonl"))?;
    // Reproducibility: one thread for tokenizer training (no rayon ordering effects), a fixed
    // number of torch threads, torch's generator seeded.
    tokenizers::utils::parallelism::set_parallelism(false);
    tch::set_num_threads(config.torch_threads.max(1) as i32);
    tch::manual_seed(config.seed as i64);
    let mut rng = fastrand::Rng::with_seed(config.seed);
    let mut eval_rng = fastrand::Rng::with_seed(config.seed ^ 0x5eed_e7a1);

    // 1. Tokenizer, codec and policy.
    let (codec, policy) = match model_dir {
        Some(dir) => {
            let device = Device::cuda_if_available();
            load_hf(dir, device)?
        }
        None => {
            let tokenizer =
                train_tokenizer(&corpus(config.files_per_task, &mut rng), config.vocab_size)?;
            save_tokenizer(&tokenizer, &out.join("policy"))?;
            let vocab = tokenizer.get_vocab_size(true);
            let codec = scratch_codec(tokenizer)?;
            (
                codec,
                scratch_model(&config.model, vocab, config.seed as i64)?,
            )
        }
    };
    let codec = Arc::new(codec);
    let engine = Arc::new(TchEngine::new(
        clone_model(&policy)?,
        EngineConfig {
            max_batch_size: config.engine_batch.max(1),
            ..EngineConfig::default()
        },
    ));
    let seeded = Arc::new(Seeded::new(engine.clone(), config.seed));
    let policy_gen: Arc<dyn TokenGenerator> = seeded.clone();
    let settings = |temperature: f64, samples: u32| RolloutSettings {
        temperature,
        max_turn_tokens: config.max_turn_tokens,
        max_turns: config.max_turns,
        concurrency: config.concurrency,
        samples_per_task: samples,
        host: HostConfig::default(),
        progress: None,
    };
    let held_out = tasks(
        "eval",
        config.eval_tasks,
        config.files_per_task,
        &mut eval_rng,
    );
    let held_out_tasks: Vec<Task> = held_out.iter().map(FileQuestion::to_task).collect();

    // 2. SFT warm start on demonstrations run through the real loop in real sandboxes.
    let sft_tasks = tasks("sft", config.sft_tasks, config.files_per_task, &mut rng);
    let demos = run_rollouts(
        Arc::new(Demonstrator::new(codec.clone(), &sft_tasks)),
        codec.clone(),
        sft_tasks.iter().map(FileQuestion::to_task).collect(),
        &settings(0.0, 1),
    )
    .await?;
    write_jsonl(&mut jsonl, "demonstration", 0, &demos, &|_| Vec::new())?;
    let demo_success = success(&demos);
    if demo_success < 1.0 {
        return Err(Error::internal(format!(
            "only {:.0}% of the demonstrations succeed: {:?}",
            demo_success * 100.0,
            exit_reasons(&demos)
        )));
    }
    let rows: Vec<_> = demos.iter().map(|t| t.output.clone()).collect();
    let sft_config = TrainerConfig {
        mode: TrainMode::Sft,
        optim: OptimConfig {
            lr: config.sft_lr,
            weight_decay: 0.0,
            ..OptimConfig::default()
        },
        micro_batch_size: 16,
        ..TrainerConfig::default()
    };
    let mut sft = Trainer::new(policy, None, sft_config)?;
    let pb = bar(config.sft_steps, "sft");
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let mut cursor = order.len();
    let mut sft_loss = Vec::new();
    for _ in 0..config.sft_steps {
        let mut batch = Vec::with_capacity(config.sft_batch);
        while batch.len() < config.sft_batch.min(rows.len()) {
            if cursor == order.len() {
                rng.shuffle(&mut order);
                cursor = 0;
            }
            batch.push(rows[order[cursor]].clone());
            cursor += 1;
        }
        let m = sft.step(&TrainBatch::sft(batch))?;
        sft_loss.push(m.loss);
        pb.set_message(format!("nll {:.3}", m.loss));
        pb.inc(1);
    }
    pb.finish();
    engine.update_weights(sft.policy())?;

    // 3. Held-out success of the SFT-only policy (greedy).
    let eval = |step: usize| {
        let tasks = held_out_tasks.clone();
        let generator = policy_gen.clone();
        let codec = codec.clone();
        let s = settings(0.0, 1);
        async move {
            let ts = run_rollouts(generator, codec, tasks, &s).await?;
            Ok::<_, Error>((step, ts))
        }
    };
    let (_, sft_eval) = eval(0).await?;
    eprintln!(
        "SFT only: held-out success {:.1}%",
        success(&sft_eval) * 100.0
    );
    write_jsonl(&mut jsonl, "eval", 0, &sft_eval, &|id| {
        seeded.take_versions(id)
    })?;
    let sft_success = success(&sft_eval);
    let mut curve = vec![(0usize, sft_success)];
    let sft_reward = mean_reward(&sft_eval);
    let mut reward_curve = vec![(0usize, sft_reward)];
    let mut train_curve: Vec<(usize, f64)> = Vec::new();

    // 4. RL on the policy's own rollouts.
    let loss_mode = match config.loss.as_str() {
        "grpo" => PolicyLossMode::Vanilla,
        "gspo" => PolicyLossMode::Gspo,
        other => {
            return Err(Error::invalid_input(format!(
                "unknown loss `{other}` (grpo or gspo)"
            )))
        }
    };
    let rl_config = TrainerConfig {
        mode: TrainMode::Rl(RlObjective {
            loss_mode,
            ..RlObjective::default()
        }),
        optim: OptimConfig {
            lr: config.rl_lr,
            weight_decay: 0.0,
            ..OptimConfig::default()
        },
        micro_batch_size: 16,
        temperature: config.temperature,
        ..TrainerConfig::default()
    };
    let mut trainer = Trainer::new(clone_model(sft.policy())?, None, rl_config)?;
    drop(sft);
    let mut steps = Vec::new();
    let (mut trainer_idle_s, mut train_secs) = (0.0f64, 0.0f64);
    let rl_started = Instant::now();
    let is_async = match config.mode.as_str() {
        "sync" => false,
        "async" => true,
        other => {
            return Err(Error::invalid_input(format!(
                "unknown mode `{other}` (sync or async)"
            )))
        }
    };
    // Two bars: RL episodes as they finish (the rollouter may run ahead) and trainer steps.
    let bars = MultiProgress::new();
    let episodes = bars.add(bar(
        config.rl_steps * config.rl_tasks_per_step * config.group_size as usize,
        "rollouts",
    ));
    let rl_settings = RolloutSettings {
        progress: Some(episodes.clone()),
        ..settings(config.temperature, config.group_size)
    };
    let mut source = if is_async {
        let (r, rx) = Rollouter::start(
            policy_gen.clone(),
            codec.clone(),
            rl_settings.clone(),
            config.rl_tasks_per_step,
            config.pipeline,
            config.files_per_task,
            config.seed ^ 0xa5a5,
        );
        Some((r, rx))
    } else {
        None
    };
    let pb = bars.add(bar(config.rl_steps, "rl"));
    for step in 1..=config.rl_steps {
        let t0 = Instant::now();
        let ts: Vec<Trajectory> = match &mut source {
            None => {
                let batch_tasks = tasks(
                    &format!("rl{step}"),
                    config.rl_tasks_per_step,
                    config.files_per_task,
                    &mut rng,
                );
                run_rollouts(
                    policy_gen.clone(),
                    codec.clone(),
                    batch_tasks.iter().map(FileQuestion::to_task).collect(),
                    &rl_settings,
                )
                .await?
            }
            Some((_, rx)) => {
                let mut all = Vec::new();
                for _ in 0..config.rl_tasks_per_step {
                    let group = rx
                        .recv()
                        .await
                        .ok_or_else(|| Error::internal("the rollouter stopped"))??;
                    all.extend(group);
                }
                all
            }
        };
        let rollout_s = t0.elapsed().as_secs_f64();
        trainer_idle_s += rollout_s;
        let trained_version = engine.weight_version();
        let staleness = std::cell::Cell::new(0u64);
        write_jsonl(&mut jsonl, "rl", step, &ts, &|id| {
            let v = seeded.take_versions(id);
            if let Some(oldest) = v.iter().min() {
                staleness.set(staleness.get().max(trained_version.saturating_sub(*oldest)));
            }
            v
        })?;
        let sampled: u64 = ts.iter().map(|t| t.counts.sampled_tokens).sum();
        let batch_reward = mean_reward(&ts);
        let usable: Vec<&Trajectory> = ts
            .iter()
            .filter(|t| !t.output.response_ids.is_empty())
            .collect();
        let t1 = Instant::now();
        let (mut loss, mut grad_norm, mut adv_abs) = (f64::NAN, f64::NAN, f64::NAN);
        let outputs: Vec<&AgentLoopOutput> = usable.iter().map(|t| &t.output).collect();
        let (lp_diff, ratio) =
            tokio::task::block_in_place(|| logprob_check(trainer.policy(), &outputs))?;
        let mixed = mixed_groups(&usable);
        if !usable.is_empty() {
            let uids: Vec<String> = usable.iter().map(|t| t.task_id.clone()).collect();
            let rows = usable.iter().map(|t| t.output.clone()).collect();
            let batch = TrainBatch::with_grpo(rows, &uids, true)?;
            adv_abs = mean_abs_advantage(&batch);
            let m = tokio::task::block_in_place(|| trainer.step(&batch))?;
            loss = m.loss;
            grad_norm = m.grad_norm;
        }
        if step == 1 {
            let line = format!(
                "rl step 1: max |trainer - rollout logprob| {lp_diff:.2e}, mean ratio {ratio:.4}, \
                 reward {batch_reward:.3}, mixed groups {mixed:.2}, mean |advantage| {adv_abs:.3}"
            );
            pb.suspend(|| eprintln!("{line}"));
        }
        let sync_every = if is_async {
            config.pipeline.trigger_parameter_sync_step.max(1)
        } else {
            1
        };
        if step % sync_every == 0 {
            match &source {
                None => {
                    engine.update_weights(trainer.policy())?;
                }
                Some((r, _)) => {
                    let consumed = step * config.rl_tasks_per_step;
                    r.sync(consumed, || engine.update_weights(trainer.policy()))
                        .await?;
                }
            }
        }
        let train_s = t1.elapsed().as_secs_f64();
        train_secs += train_s;
        let mut row = json!({
            "step": step,
            "weight_version": engine.weight_version(),
            "mean_reward": batch_reward,
            "success_rate": success(&ts),
            "loss": loss,
            "grad_norm": grad_norm,
            "logprob_max_abs_diff": lp_diff,
            "importance_ratio": ratio,
            "mixed_groups": mixed,
            "mean_abs_advantage": adv_abs,
            "sampled_tokens": sampled,
            "tokens_per_s": sampled as f64 / rollout_s.max(1e-9),
            "rollout_wait_s": rollout_s,
            "train_s": train_s,
            "staleness": staleness.get(),
            "exit_reasons": exit_reasons(&ts),
            "held_out_success": Value::Null,
        });
        if step % config.eval_every.max(1) == 0 || step == config.rl_steps {
            let (_, ev) = eval(step).await?;
            write_jsonl(&mut jsonl, "eval", step, &ev, &|id| {
                seeded.take_versions(id)
            })?;
            let s = success(&ev);
            curve.push((step, s));
            reward_curve.push((step, mean_reward(&ev)));
            row["held_out_success"] = json!(s);
            pb.suspend(|| eprintln!("step {step}: held-out success {:.1}%", s * 100.0));
        }
        train_curve.push((step, success(&ts)));
        pb.set_message(format!("reward {batch_reward:.2}"));
        pb.inc(1);
        steps.push(row);
    }
    let rl_wall = rl_started.elapsed().as_secs_f64();
    let rollout_idle = match source {
        Some((r, _)) => r.stop().await,
        None => train_secs / rl_wall.max(1e-9),
    };
    episodes.finish();
    pb.finish();
    let rl_success = curve.last().map_or(sft_success, |c| c.1);
    let rl_reward = reward_curve.last().map_or(sft_reward, |c| c.1);
    plot_curve(
        &out.join("learning_curve.png"),
        &curve,
        &train_curve,
        config.rl_steps,
    )?;
    // The trained policy as a Hugging Face directory (config.json, model.safetensors and,
    // from the start, tokenizer.json and tokenizer_config.json): `--model-dir` loads it back.
    let export = out.join("policy");
    trainer.policy().save_pretrained(&export)?;
    if let Some(dir) = model_dir {
        for file in [
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
        ] {
            if dir.join(file).exists() {
                std::fs::copy(dir.join(file), export.join(file))
                    .map_err(io("copying the tokenizer files"))?;
            }
        }
    }
    let summary = json!({
        "mode": config.mode,
        "pipeline": config.pipeline,
        "loss": config.loss,
        "held_out_tasks": config.eval_tasks,
        "seed": config.seed,
        "sft_only_success": sft_success,
        "rl_success": rl_success,
        "sft_only_reward": sft_reward,
        "rl_reward": rl_reward,
        "improvement_points": (rl_success - sft_success) * 100.0,
        "sft_final_nll": sft_loss.last(),
        "curve": curve,
        "reward_curve": reward_curve,
        "trainer_idle_ratio": trainer_idle_s / rl_wall.max(1e-9),
        "rollout_idle_ratio": rollout_idle,
        "rl_wall_s": rl_wall,
        "wall_s": started.elapsed().as_secs_f64(),
    });
    write_metrics(out, &steps, &summary)?;
    Ok(summary.to_string())
}

/// `metrics.csv` (one row per RL step) and `metrics.json` (steps and summary).
fn write_metrics(out: &Path, steps: &[Value], summary: &Value) -> Result<()> {
    let cols = [
        "step",
        "weight_version",
        "mean_reward",
        "success_rate",
        "held_out_success",
        "loss",
        "grad_norm",
        "logprob_max_abs_diff",
        "importance_ratio",
        "mixed_groups",
        "mean_abs_advantage",
        "sampled_tokens",
        "tokens_per_s",
        "rollout_wait_s",
        "train_s",
        "staleness",
    ];
    let mut csv = cols.join(",");
    csv.push('\n');
    for s in steps {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| match &s[*c] {
                Value::Null => String::new(),
                v => v.to_string(),
            })
            .collect();
        csv.push_str(&cells.join(","));
        csv.push('\n');
    }
    std::fs::write(out.join("metrics.csv"), csv).map_err(io("writing metrics.csv"))?;
    let all = json!({"steps": steps, "summary": summary});
    std::fs::write(out.join("metrics.json"), all.to_string()).map_err(io("writing metrics.json"))
}
