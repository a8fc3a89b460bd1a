//! `uniagent train` as a library call: split the run's tasks, build the policy (a
//! `model.dir`, or a tokenizer and tiny model from scratch), hand the environment's tools,
//! reward and sandboxes to `uniagent_train::pipeline`, export the policy. The training itself
//! — SFT, the sync or fully-async RL loop, metrics — is the pipeline's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use uniagent_core::codec::Codec;
use uniagent_core::runner::{ProgressEvent, RolloutSource};
use uniagent_core::{Task, TokenGenerator};
use uniagent_gateway::harness::HarnessRollouts;
use uniagent_train::model::Qwen2ForCausalLM;
use uniagent_train::pipeline::{
    Demonstrator, Pipeline, RolloutProgress, RolloutSpec, Summary, TaskSource,
};
use uniagent_train::scratch::{
    load_hf, save_tokenizer, scratch_codec, scratch_model, train_tokenizer,
};
use uniagent_train::tch::Device;

use super::section::{RolloutSection, TrainerSection};
use crate::env::DEMONSTRATION_TURNS;
use crate::error::{CliError, Result};
use crate::model::ModelConfig;
use crate::output::{count_by, OutputDir, TRAJECTORIES};
use crate::report::Report;
use crate::run::Prepared;
use crate::view::read_rows;

/// What `train` leaves besides the pipeline's files.
#[derive(Debug, Clone)]
pub struct TrainReport {
    /// The pipeline's summary (held-out success before and after RL, curves, idle ratios).
    pub summary: Summary,
    /// The exported policy (a Hugging Face directory `model.dir` loads).
    pub policy_dir: PathBuf,
    /// `summary.json` as written: the pipeline's summary plus the run's counts.
    pub summary_json: Value,
}

/// The tasks of each phase.
#[derive(Debug, Clone, Default)]
pub struct Phases {
    /// Demonstrated for SFT (the first `split.sft_tasks`).
    pub sft: Vec<Task>,
    /// Trained on by RL (every task not held out).
    pub rl: Vec<Task>,
    /// Held out (the last `split.eval_tasks`).
    pub held_out: Vec<Task>,
}

/// Splits `tasks` per `section.split`; errors (exit 2) name `trainer.split`.
pub fn split_tasks(prepared: &Prepared, section: &TrainerSection) -> Result<Phases> {
    let n = prepared.tasks.len();
    let s = section.split;
    let at = |key: &str| ["trainer".to_owned(), "split".to_owned(), key.to_owned()];
    if s.eval_tasks >= n {
        return Err(prepared.doc.error_at(
            &at("eval_tasks"),
            format!(
                "holds out {} of {n} tasks: none left to train on",
                s.eval_tasks
            ),
        ));
    }
    let trainable = n - s.eval_tasks;
    if s.sft_tasks > trainable {
        return Err(prepared.doc.error_at(
            &at("sft_tasks"),
            format!(
                "{} demonstrated tasks, but only {trainable} are not held out",
                s.sft_tasks
            ),
        ));
    }
    Ok(Phases {
        sft: prepared.tasks[..s.sft_tasks].to_vec(),
        rl: prepared.tasks[..trainable].to_vec(),
        held_out: prepared.tasks[trainable..].to_vec(),
    })
}

/// Builds the demonstrations table of `tasks` from the environment; every demonstrated
/// task needs at least its first turn.
fn demonstrations(prepared: &Prepared, tasks: &[Task]) -> Result<HashMap<(String, usize), String>> {
    let mut table = HashMap::new();
    for task in tasks {
        let turns = (0..DEMONSTRATION_TURNS)
            .map_while(|turn| prepared.environment.demonstration(task, turn));
        let before = table.len();
        for (turn, text) in turns.enumerate() {
            table.insert((task.id.clone(), turn), text);
        }
        if table.len() == before {
            return Err(prepared.doc.error_at(
                &["trainer".into(), "split".into(), "sft_tasks".into()],
                format!(
                    "environment `{}` has no demonstration for task `{}`; set trainer.split.sft_tasks: 0 to train by RL alone",
                    prepared.environment.name(),
                    task.id
                ),
            ));
        }
    }
    Ok(table)
}

/// The policy and its codec: `model.dir` when set, else a tokenizer trained on the
/// environment's corpus (saved into `policy/`) and a tiny model initialised from the seed.
fn policy(
    prepared: &Prepared,
    section: &TrainerSection,
    phases: &Phases,
    policy_dir: &Path,
) -> Result<(Codec, Qwen2ForCausalLM, Option<PathBuf>)> {
    let ModelConfig::Tch(tch) = &prepared.config.model else {
        return Err(prepared.doc.error_at(
            &["model".into(), "type".into()],
            format!(
                "`train` trains a local policy: set model.type to `tch` (it is `{}`)",
                prepared.config.model.backend()
            ),
        ));
    };
    if let Some(dir) = &tch.dir {
        let (codec, model) = load_hf(dir, Device::cuda_if_available())
            .map_err(|e| CliError::preflight(format!("model.dir {}: {e}", dir.display())))?;
        return Ok((codec, model, Some(dir.clone())));
    }
    // One thread for tokenizer training: the same seed gives the same merges.
    let corpus = prepared.environment.tokenizer_corpus(&phases.rl);
    if corpus.is_empty() {
        return Err(prepared.doc.error_at(
            &["model".into(), "dir".into()],
            format!(
                "environment `{}` gives no text to train a tokenizer on: set model.dir to a policy directory",
                prepared.environment.name()
            ),
        ));
    }
    let tokenizer = train_tokenizer(&corpus, section.scratch.vocab_size)
        .map_err(|e| CliError::runtime(format!("training the tokenizer: {e}")))?;
    save_tokenizer(&tokenizer, policy_dir).map_err(|e| CliError::runtime(e.to_string()))?;
    let vocab = tokenizer.get_vocab_size(true);
    let codec = scratch_codec(tokenizer).map_err(|e| CliError::runtime(e.to_string()))?;
    let model = scratch_model(&section.scratch.model, vocab, section.pipeline.seed as i64)
        .map_err(|e| CliError::runtime(format!("initialising the policy: {e}")))?;
    Ok((codec, model, None))
}

/// Prints a line on stderr every `every` finished rollouts (progress goes to stderr).
fn progress_printer(every: u64) -> RolloutProgress {
    let done = Arc::new(AtomicU64::new(0));
    let solved = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    Arc::new(move |event: &ProgressEvent| {
        if let ProgressEvent::Finished { success, .. } = event {
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            let s = solved.fetch_add(u64::from(*success), Ordering::Relaxed) + u64::from(*success);
            if n.is_multiple_of(every) {
                eprintln!(
                    "[{:>6.1}s] {n} rollouts finished, {s} solved",
                    started.elapsed().as_secs_f64()
                );
            }
        }
    })
}

/// The rollout side of every phase: our loop over the environment's parts, or the
/// configured harness through a gateway serving the policy's codec.
fn rollout_source(
    prepared: &Prepared,
    section: &TrainerSection,
    codec: Arc<Codec>,
) -> Result<Arc<dyn RolloutSource>> {
    if let RolloutSection::Harness(harness) = &section.rollout {
        // The harness brings its own tools and reward: the environment's are not built.
        let gateway = crate::config::harness_gateway(&prepared.loop_config());
        let source = HarnessRollouts::new(harness.clone(), codec, gateway).map_err(|e| {
            prepared
                .doc
                .error_at(&["trainer".into(), "rollout".into()], e)
        })?;
        return Ok(Arc::new(source));
    }
    let (parts, loop_config, _runner) = prepared.rollout_parts()?;
    if parts.reward.is_none() {
        return Err(prepared.doc.error_at(
            &["environment".into()],
            format!(
                "environment `{}` has no reward: nothing to train on",
                prepared.environment.name()
            ),
        ));
    }
    Ok(Arc::new(RolloutSpec {
        parts,
        loop_config,
        codec,
        progress: Some(progress_printer(64)),
        environment: prepared.environment.name().to_owned(),
    }))
}

/// Runs the whole training: demonstrations and SFT, held-out evaluation, RL, export.
/// Writes into `prepared.out`: `trajectories.jsonl` (tagged with `phase` and `step`),
/// `metrics.jsonl`, `summary.json`, `learning_curve.png`, `config.yaml` and `policy/`.
pub async fn train(prepared: &Prepared, section: &TrainerSection) -> Result<TrainReport> {
    let started = Instant::now();
    let phases = split_tasks(prepared, section)?;
    let demos = demonstrations(prepared, &phases.sft)?;
    let out = OutputDir::create(&prepared.out)?;
    // Rerunning with the same --out resumes from the run's latest checkpoint; a run that
    // stopped before its first one is left alone rather than overwritten.
    let checkpoint = Pipeline::latest_checkpoint(&prepared.out)
        .map_err(|e| CliError::preflight(format!("reading the run's checkpoints: {e}")))?;
    if checkpoint.is_none() && prepared.out.join("metrics.jsonl").exists() {
        return Err(CliError::preflight(format!(
            "{} already holds a training run with no checkpoint to resume from (it stopped before its first): choose another --out or remove it",
            prepared.out.display()
        )));
    }
    out.write_config(prepared.doc.value())?;
    prepared.environment.preflight(&prepared.tasks).await?;

    uniagent_train::tch::set_num_threads(section.pipeline.torch_threads as i32);
    let policy_dir = prepared.out.join("policy");
    let (codec, model, tokenizer_dir) = policy(prepared, section, &phases, &policy_dir)?;
    let codec = Arc::new(codec);
    let spec = rollout_source(prepared, section, codec.clone())?;
    let seed = section.pipeline.seed;
    let mut pipeline = match checkpoint {
        Some(checkpoint) => {
            eprintln!(
                "train: resuming {} from its checkpoint after RL step {}",
                prepared.out.display(),
                checkpoint.step()
            );
            Pipeline::resume(model, spec, section.pipeline.clone(), checkpoint)
        }
        None => Pipeline::new(model, spec, section.pipeline.clone(), &prepared.out),
    }
    .map_err(|e| prepared.doc.error_at(&["trainer".into()], e))?;
    let demonstrator: Arc<dyn TokenGenerator> = Arc::new(Demonstrator::new(
        codec,
        move |task_id: &str, turn: usize| demos.get(&(task_id.to_owned(), turn)).cloned(),
    ));
    eprintln!(
        "train: {} SFT tasks, {} RL tasks, {} held out; {} mode, {} loss, {} RL steps",
        phases.sft.len(),
        phases.rl.len(),
        phases.held_out.len(),
        serde_json::to_value(section.pipeline.rl.mode).unwrap_or_default(),
        section.pipeline.rl.loss_mode,
        section.pipeline.rl.steps,
    );
    let summary = pipeline
        .run(
            demonstrator,
            phases.sft.clone(),
            TaskSource::new(phases.rl.clone(), seed),
            &phases.held_out,
        )
        .await
        .map_err(|e| CliError::runtime(format!("training: {e}")))?;
    pipeline
        .export(&policy_dir, tokenizer_dir.as_deref().or(Some(&policy_dir)))
        .map_err(|e| CliError::runtime(format!("exporting the policy: {e}")))?;
    let summary_json = write_summary(prepared, &summary, started.elapsed().as_secs_f64())?;
    Ok(TrainReport {
        summary,
        policy_dir,
        summary_json,
    })
}

/// `summary.json`: the pipeline's summary plus the counts every output directory has
/// (`tasks`, `rollouts`, `exit_reasons` over every phase; `success_rate` and `mean_reward` of
/// the last held-out evaluation) and the [`Report`] (RL rollouts, curve, held-out gain).
fn write_summary(prepared: &Prepared, summary: &Summary, wall: f64) -> Result<Value> {
    let path = prepared.out.join(TRAJECTORIES);
    let rows = read_rows(&path)
        .map_err(|e| CliError::runtime(format!("reading {}: {e}", path.display())))?;
    let exit_reasons = count_by(&rows, |r| r.exit_reason.as_str());
    let phases = count_by(&rows, |r| r.phase.as_deref().unwrap_or("unknown"));
    let rollouts = rows.len();
    let mut v = serde_json::to_value(summary)
        .map_err(|e| CliError::runtime(format!("encoding the summary: {e}")))?;
    if let Value::Object(map) = &mut v {
        map.insert("tasks".into(), json!(prepared.tasks.len()));
        map.insert("rollouts".into(), json!(rollouts));
        map.insert("rollouts_by_phase".into(), json!(phases));
        map.insert("success_rate".into(), json!(summary.rl_success));
        map.insert("mean_reward".into(), json!(summary.rl_reward));
        map.insert("exit_reasons".into(), json!(exit_reasons));
        map.insert("wall_time".into(), json!(wall));
        map.insert("report".into(), json!(Report::build(&rows)));
    }
    let text = serde_json::to_string_pretty(&v)
        .map_err(|e| CliError::runtime(format!("encoding the summary: {e}")))?;
    std::fs::write(prepared.out.join("summary.json"), text)
        .map_err(|e| CliError::runtime(format!("writing summary.json: {e}")))?;
    Ok(v)
}
