//! [`Pipeline`]: demonstrations → SFT → held-out evaluation → RL (sync or fully async) →
//! export, with the records on disk.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use uniagent_core::agent::{TrainingUse, Trajectory};
use uniagent_core::{AgentLoopOutput, Error, Result, Task, TokenGenerator};

use super::checkpoint::{self, Checkpoint, RunState};
use super::config::{Mode, PipelineConfig};
use super::diagnostics::{mixed_groups, ratio_stats, staleness_histogram};
use super::metrics::{Records, StepRecord, Summary};
use super::rollout::Seeded;
use super::rollouter::{RolloutPlan, Rollouter};
use super::tasks::TaskSource;
use super::weight_sync::WeightSync;
use crate::generate::{EngineConfig, LogprobKind, TchEngine};
use crate::model::Qwen2ForCausalLM;
use crate::trainer::{
    OptimConfig, RlObjective, StepMetrics, TrainBatch, TrainMode, Trainer, TrainerConfig,
};
use uniagent_core::runner::{RolloutPhase, RolloutSource};

/// Runs CPU-heavy work (forward/backward passes) without stalling the runtime's other tasks
/// when the runtime has several workers.
pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Held-out success and mean reward of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Evaluation {
    /// Share of episodes the reward calls solved.
    pub success: f64,
    /// Mean reward (missing = 0).
    pub reward: f64,
}

/// The training pipeline over one Qwen2 policy, its generation side (the in-process engine, or
/// any generator with a [`WeightSync`] that brings it the weights: [`Self::with_generation`])
/// and a rollout side (a [`RolloutSource`]: our loop as [`super::RolloutSpec`], or a black-box
/// harness through the gateway). Needs a tokio runtime; with a multi-threaded one,
/// training steps leave the other workers free for rollouts.
pub struct Pipeline {
    pub(super) config: PipelineConfig,
    pub(super) spec: Arc<dyn RolloutSource>,
    pub(super) policy: Option<Qwen2ForCausalLM>,
    pub(super) engine: Option<Arc<TchEngine>>,
    generator: Arc<dyn TokenGenerator>,
    /// Brings the trained weights to `generator`.
    pub(super) sync: Arc<dyn WeightSync>,
    /// Weights staged (after SFT) that the generator does not use yet.
    pub(super) sync_pending: bool,
    out: PathBuf,
    records: Records,
    pub(super) sft_losses: Vec<f64>,
    pub(super) sft_probes: Vec<(usize, f64)>,
    /// The checkpoint a resumed pipeline continues from (taken by the RL phase).
    resume: Option<Checkpoint>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("config", &self.config)
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline training `policy` on the environment of `spec`, writing to `out`
    /// (`trajectories.jsonl`, `metrics.jsonl`, `summary.json`, `learning_curve.png`, and run
    /// checkpoints under `checkpoints/`). Starts afresh: records and checkpoints of an earlier
    /// run in `out` are replaced (see [`Self::resume`] to continue one instead).
    /// Seeds torch and fixes its thread count from `config`.
    pub fn new(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        out: &Path,
    ) -> Result<Self> {
        config.validate()?;
        checkpoint::clear(out)?;
        let records = Records::create(out)?;
        Self::build(policy, spec, config, out, records, None)
    }

    /// Continues the run in `out` from its latest checkpoint: the policy's weights, the
    /// optimizer, the RL step, the task cursor and the generator's weight version are
    /// restored, the records are cut back to what the checkpoint saw, and [`Self::run`] (or
    /// [`Self::rl`]) goes on with the next RL step, skipping SFT and the first evaluation.
    /// `policy` must have the architecture of the checkpointed one; `config` must equal the
    /// run's, except `rl.steps`, which may grow. A sync run resumed this way gives the metrics
    /// of an uninterrupted one: every random choice is derived from the seed and the data
    /// (shuffling from the epoch, sampling from the session), none from a global generator.
    /// An async run restarts its rollout workers at the saved cursor: groups that were in
    /// flight are not trained on.
    ///
    /// ```no_run
    /// # use uniagent_train::pipeline::{Pipeline, PipelineConfig, RolloutSpec};
    /// # fn demo(policy: uniagent_train::model::Qwen2ForCausalLM, spec: RolloutSpec,
    /// #         config: PipelineConfig) -> uniagent_core::Result<()> {
    /// let out = std::path::Path::new("runs/a");
    /// let pipeline = match Pipeline::checkpoint_step(out)? {
    ///     Some(_) => Pipeline::resume(policy, spec, config, out)?,
    ///     None => Pipeline::new(policy, spec, config, out)?,
    /// };
    /// # Ok(()) }
    /// ```
    pub fn resume(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        out: &Path,
    ) -> Result<Self> {
        config.validate()?;
        let cp = checkpoint::latest(out)?.ok_or_else(|| {
            Error::invalid_input(format!(
                "{} holds no run checkpoint ({}/latest): nothing to resume",
                out.display(),
                checkpoint::CHECKPOINTS
            ))
        })?;
        checkpoint::check_compatible(&cp.state, &config)?;
        policy.load_weights(&cp.dir)?;
        let records = Records::reopen(out, cp.state.records)?;
        let mut pipeline = Self::build(policy, spec, config, out, records, None)?;
        if let Some(engine) = &pipeline.engine {
            engine.set_weight_version(cp.state.weight_version);
        }
        pipeline.sft_losses = cp.state.sft_losses.clone();
        pipeline.sft_probes = cp.state.sft_probes.clone();
        tracing::info!(step = cp.state.step, dir = %cp.dir.display(), "resuming");
        pipeline.resume = Some(cp);
        Ok(pipeline)
    }

    /// The RL step of the latest checkpoint in `out`, if it holds one.
    pub fn checkpoint_step(out: &Path) -> Result<Option<usize>> {
        Ok(checkpoint::latest(out)?.map(|cp| cp.state.step))
    }

    /// The pipeline over `records`: generation by the in-process engine, or by `external`
    /// (a generator and the sync that brings it the trained weights).
    fn build(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        out: &Path,
        records: Records,
        external: Option<(Arc<dyn TokenGenerator>, Arc<dyn WeightSync>)>,
    ) -> Result<Self> {
        tch::set_num_threads(config.torch_threads as i32);
        tch::manual_seed(config.seed as i64);
        let (engine, generator, sync) = match external {
            Some((generator, sync)) => (None, generator, sync),
            None => {
                let engine = Arc::new(TchEngine::new(
                    policy.try_clone()?,
                    EngineConfig {
                        max_batch_size: config.engine_batch,
                        logprobs: if config.rl.correction.is_disabled() {
                            LogprobKind::Raw
                        } else {
                            LogprobKind::Processed
                        },
                    },
                ));
                let generator: Arc<dyn TokenGenerator> = engine.clone();
                let sync: Arc<dyn WeightSync> = engine.clone();
                (Some(engine), generator, sync)
            }
        };
        Ok(Self {
            records,
            out: out.to_path_buf(),
            generator: Arc::new(Seeded::new(generator, config.seed)),
            config,
            spec: Arc::new(spec),
            policy: Some(policy),
            engine,
            sync,
            sync_pending: false,
            sft_losses: Vec::new(),
            sft_probes: Vec::new(),
            resume: None,
        })
    }

    /// A pipeline as [`Self::new`] whose rollouts come from `generator` (e.g. an SGLang or
    /// vLLM server), which `sync` brings the trained weights to (e.g. `HttpWeightSync`, feature
    /// `http-sync`). Requests get seeds as with the in-process engine. The generator's
    /// logprobs must be those the run compares with: processed at the rollout temperature
    /// when `rl.correction` is set, raw otherwise. Run checkpoints are written as with
    /// [`Self::new`]; [`Self::resume`] continues them with the in-process engine.
    pub fn with_generation(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        out: &Path,
        generator: Arc<dyn TokenGenerator>,
        sync: Arc<dyn WeightSync>,
    ) -> Result<Self> {
        config.validate()?;
        checkpoint::clear(out)?;
        let records = Records::create(out)?;
        Self::build(policy, spec, config, out, records, Some((generator, sync)))
    }

    /// The policy (between phases).
    pub fn policy(&self) -> Result<&Qwen2ForCausalLM> {
        self.policy
            .as_ref()
            .ok_or_else(|| Error::internal("the policy is inside a failed phase"))
    }

    /// The in-process generation engine holding the rollout weights (`None` with
    /// [`Self::with_generation`]).
    pub fn engine(&self) -> Option<&Arc<TchEngine>> {
        self.engine.as_ref()
    }

    /// What brings the trained weights to the generator.
    pub fn weight_sync(&self) -> &Arc<dyn WeightSync> {
        &self.sync
    }

    /// The seeded generator the rollouts use.
    pub fn generator(&self) -> Arc<dyn TokenGenerator> {
        self.generator.clone()
    }

    /// Runs `tasks` once each with `demonstrator` (e.g. a [`super::Demonstrator`]) through
    /// the real loop; fails unless every one succeeds. Returns them for [`Self::sft`].
    pub async fn demonstrations(
        &mut self,
        demonstrator: Arc<dyn TokenGenerator>,
        tasks: Vec<Task>,
    ) -> Result<Vec<Trajectory>> {
        let ts = self
            .spec
            .run(
                demonstrator,
                RolloutPhase::greedy(tasks, self.config.max_concurrent_rollouts),
            )
            .await?;
        self.records.trajectories("demonstration", 0, &ts)?;
        let failed: Vec<String> = ts
            .iter()
            .filter(|t| !t.is_success())
            .map(|t| format!("{} ({})", t.id, t.exit_reason))
            .collect();
        if !failed.is_empty() {
            return Err(Error::invalid_input(format!(
                "{} of {} demonstrations fail: {}",
                failed.len(),
                ts.len(),
                failed.join(", ")
            )));
        }
        Ok(ts)
    }

    pub(super) fn take_policy(&mut self) -> Result<Qwen2ForCausalLM> {
        self.policy
            .take()
            .ok_or_else(|| Error::internal("the policy is inside a failed phase"))
    }

    /// Greedy rollouts of `tasks` with the engine's current weights (recorded as phase
    /// `eval` at `step`).
    pub async fn evaluate(&mut self, tasks: &[Task], step: usize) -> Result<Evaluation> {
        let e = self.evaluate_as("eval", tasks, step).await?;
        tracing::info!(
            step,
            success = e.success,
            reward = e.reward,
            "held-out evaluation"
        );
        Ok(e)
    }

    /// Greedy rollouts of `tasks`, recorded as phase `phase` at `step`.
    pub(super) async fn evaluate_as(
        &mut self,
        phase: &str,
        tasks: &[Task],
        step: usize,
    ) -> Result<Evaluation> {
        self.commit_pending().await?;
        let ts = self
            .spec
            .run(
                self.generator.clone(),
                RolloutPhase::greedy(tasks.to_vec(), self.config.max_concurrent_rollouts),
            )
            .await?;
        self.records.trajectories(phase, step, &ts)?;
        let n = ts.len().max(1) as f64;
        Ok(Evaluation {
            success: ts.iter().filter(|t| t.is_success()).count() as f64 / n,
            reward: ts
                .iter()
                .map(|t| t.output.reward_score.unwrap_or(0.0))
                .sum::<f64>()
                / n,
        })
    }

    /// The RL phase: `rl.steps` trainer steps on groups of tasks from `source`, synchronous
    /// or fully async per `rl.mode`, evaluating `held_out` every `rl.eval_every` steps and
    /// after the last, and writing a run checkpoint every `checkpoint.every` steps. A resumed
    /// pipeline ([`Self::resume`]) starts after the checkpoint's step. Returns the step records
    /// and the held-out curve (of the whole run when resumed).
    pub async fn rl(&mut self, source: TaskSource, held_out: &[Task]) -> Result<RlOutcome> {
        self.rl_phase(source, held_out, None).await
    }

    async fn rl_phase(
        &mut self,
        source: TaskSource,
        held_out: &[Task],
        before: Option<Evaluation>,
    ) -> Result<RlOutcome> {
        let c = self.config.rl.clone();
        let config = TrainerConfig {
            mode: TrainMode::Rl(RlObjective {
                loss_mode: c.loss.policy_loss(),
                ..RlObjective::default()
            }),
            optim: OptimConfig {
                lr: c.lr,
                weight_decay: 0.0,
                ..OptimConfig::default()
            },
            micro_batch_size: c.micro_batch_size,
            temperature: c.temperature,
            ..TrainerConfig::default()
        };
        self.commit_pending().await?;
        let mut trainer = Trainer::new(self.take_policy()?, None, config)?
            .with_rollout_correction(c.correction.clone());
        let mut source = source;
        let resume = self.resume.take();
        if let Some(cp) = &resume {
            if let Err(e) = blocking(|| trainer.resume_from(&cp.dir)) {
                self.policy = Some(trainer.into_policy());
                return Err(e);
            }
            source.seek(cp.state.cursor);
        }
        let before = resume.as_ref().and_then(|cp| cp.state.before).or(before);
        let result = self
            .rl_loop(
                &mut trainer,
                source,
                held_out,
                before,
                resume.map(|cp| cp.state),
            )
            .await;
        self.policy = Some(trainer.into_policy());
        result
    }

    async fn rl_loop(
        &mut self,
        trainer: &mut Trainer,
        source: TaskSource,
        held_out: &[Task],
        before: Option<Evaluation>,
        resumed: Option<RunState>,
    ) -> Result<RlOutcome> {
        let c = self.config.rl.clone();
        let started = Instant::now();
        let first = resumed.as_ref().map_or(1, |s| s.step + 1);
        let (is_async, batches) = match c.mode {
            Mode::Sync => (false, 1),
            Mode::Async => (true, c.r#async.require_batches),
        };
        let groups_per_step = c.tasks_per_step * batches;
        let source = Arc::new(Mutex::new(source));
        let mut rollouter = if is_async {
            let plan = RolloutPlan {
                samples: c.group_size,
                temperature: c.temperature,
                concurrency: self.config.max_concurrent_rollouts,
                groups_per_step,
            };
            Some(Rollouter::start(
                self.generator.clone(),
                self.spec.clone(),
                source.clone(),
                plan,
                c.r#async,
            ))
        } else {
            None
        };
        let (mut out, mut trainer_idle, mut train_total) = match resumed {
            Some(s) => (s.outcome, s.trainer_idle_s, s.train_s),
            None => (RlOutcome::default(), 0.0, 0.0),
        };
        let prior_wall = out.wall_s;
        let result: Result<()> = async {
            for step in first..=c.steps {
                let t0 = Instant::now();
                let ts = match &mut rollouter {
                    None => self.sample_step(&source).await?,
                    Some((_, rx)) => {
                        let mut all = Vec::new();
                        for _ in 0..groups_per_step {
                            let group = rx.recv().await.ok_or_else(|| {
                                Error::invalid_input("the task source ran out during async RL")
                            })??;
                            all.extend(group);
                        }
                        all
                    }
                };
                let wait = t0.elapsed().as_secs_f64();
                trainer_idle += wait;
                // Every RL rollout is kept, also those the step drops (infrastructure failures).
                self.records.trajectories("rl", step, &ts)?;
                let t1 = Instant::now();
                let mut record = self.train_step(trainer, step, &ts, batches)?;
                record.rollout_wait_s = wait;
                record.tokens_per_s = record.sampled_tokens as f64 / wait.max(1e-9);
                record.rollouts_per_s = ts.len() as f64 / wait.max(1e-9);
                let sync_every = if is_async {
                    c.r#async.trigger_parameter_sync_step
                } else {
                    1
                };
                if step % sync_every == 0 {
                    let rollouter = rollouter.as_ref().map(|(r, _)| r);
                    let released = (step + 1 - first) * groups_per_step;
                    record.sync_s = self.sync_weights(trainer, rollouter, released).await?;
                }
                record.weight_version = self.sync.version();
                record.train_s = t1.elapsed().as_secs_f64();
                train_total += record.train_s;
                let eval_now = (c.eval_every > 0 && step % c.eval_every == 0) || step == c.steps;
                if eval_now && !held_out.is_empty() {
                    let e = self.evaluate(held_out, step).await?;
                    out.curve.push((step, e.success));
                    out.reward_curve.push((step, e.reward));
                    record.held_out_success = Some(e.success);
                }
                self.records.step(&record)?;
                out.steps.push(record);
                let every = self.config.checkpoint.every;
                if every > 0 && (step % every == 0 || step == c.steps) {
                    out.wall_s = prior_wall + started.elapsed().as_secs_f64();
                    let cursor = source
                        .lock()
                        .map_err(|_| Error::internal("task source lock poisoned"))?
                        .cursor();
                    self.checkpoint(
                        trainer,
                        step,
                        cursor,
                        before,
                        &out,
                        (trainer_idle, train_total),
                    )?;
                }
            }
            Ok(())
        }
        .await;
        let wall = prior_wall + started.elapsed().as_secs_f64();
        out.rollout_idle_ratio = match rollouter {
            Some((r, _)) => r.stop().await,
            None => train_total / wall.max(1e-9),
        };
        out.trainer_idle_ratio = trainer_idle / wall.max(1e-9);
        out.wall_s = wall;
        result.map(|()| out)
    }

    /// One synchronous RL step's rollouts: the next `tasks_per_step` tasks, `group_size`
    /// samples each.
    async fn sample_step(&self, source: &Mutex<TaskSource>) -> Result<Vec<Trajectory>> {
        let c = &self.config.rl;
        let tasks = source
            .lock()
            .map_err(|_| Error::internal("task source lock poisoned"))?
            .take(c.tasks_per_step)?;
        let phase = RolloutPhase::sampled(
            tasks,
            c.group_size,
            c.temperature,
            self.config.max_concurrent_rollouts,
        );
        self.spec.run(self.generator.clone(), phase).await
    }

    /// Publishes the trainer's weights to the generator (with the async rollouter paused, so no
    /// request straddles two versions) and lets the rollouter run up to `released` groups.
    /// Returns the seconds it took.
    async fn sync_weights(
        &self,
        trainer: &Trainer,
        rollouter: Option<&Rollouter>,
        released: usize,
    ) -> Result<f64> {
        let started = Instant::now();
        let paused = match rollouter {
            Some(r) => r.pause().await,
            None => None,
        };
        self.sync.stage(trainer.policy())?;
        self.sync.commit().await?;
        drop(paused);
        if let Some(r) = rollouter {
            r.release(released);
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// Writes the run checkpoint after RL step `step` (see [`checkpoint`]); the last argument
    /// is the seconds waited for rollouts and spent training so far.
    fn checkpoint(
        &mut self,
        trainer: &Trainer,
        step: usize,
        cursor: super::tasks::TaskCursor,
        before: Option<Evaluation>,
        outcome: &RlOutcome,
        (trainer_idle_s, train_s): (f64, f64),
    ) -> Result<()> {
        let state = RunState {
            format: checkpoint::FORMAT,
            config: self.config.clone(),
            step,
            cursor,
            weight_version: self.sync.version(),
            before,
            sft_losses: self.sft_losses.clone(),
            sft_probes: self.sft_probes.clone(),
            outcome: outcome.clone(),
            trainer_idle_s,
            train_s,
            records: self.records.offsets()?,
        };
        let keep = self.config.checkpoint.keep;
        let dir = blocking(|| checkpoint::save(&self.out, trainer, &state, keep))?;
        tracing::info!(step, dir = %dir.display(), "run checkpoint");
        Ok(())
    }

    /// Applies the training policy to `ts`, then takes `batches` optimizer steps (one per
    /// mini-batch of groups).
    fn train_step(
        &self,
        trainer: &mut Trainer,
        step: usize,
        ts: &[Trajectory],
        batches: usize,
    ) -> Result<StepRecord> {
        let mut record = StepRecord {
            step,
            ..StepRecord::default()
        };
        for t in ts {
            *record
                .exit_reasons
                .entry(t.exit_reason.to_string())
                .or_insert(0) += 1;
        }
        record.sampled_tokens = ts.iter().map(|t| t.counts.sampled_tokens).sum();
        record.success_rate =
            ts.iter().filter(|t| t.is_success()).count() as f64 / ts.len().max(1) as f64;
        // The one policy: dropped rows leave the batch and their group's baseline; the rest
        // train with the reward the policy assigns (0 for failures the agent could cause).
        let mut kept: Vec<(Trajectory, f64)> = Vec::with_capacity(ts.len());
        for t in ts {
            match t.training_use() {
                TrainingUse::Drop => record.dropped += 1,
                TrainingUse::Train { reward } => kept.push((t.clone(), reward)),
            }
        }
        record.mean_reward = kept.iter().map(|(_, r)| r).sum::<f64>() / kept.len().max(1) as f64;
        let refs: Vec<&Trajectory> = kept.iter().map(|(t, _)| t).collect();
        let current = self.sync.version();
        record.staleness_hist = staleness_histogram(&refs, current);
        record.staleness = record.staleness_hist.keys().max().copied().unwrap_or(0);
        let pairs: Vec<(&str, f64)> = kept.iter().map(|(t, r)| (t.task_id.as_str(), *r)).collect();
        record.mixed_groups = mixed_groups(&pairs);
        let outputs: Vec<&AgentLoopOutput> = refs.iter().map(|t| &t.output).collect();
        // Compared at the temperature of the logprobs the engine reports.
        let temperature = if self.config.rl.correction.is_disabled() {
            1.0
        } else {
            self.config.rl.temperature
        };
        let ratios = blocking(|| ratio_stats(trainer.policy(), &outputs, temperature))?;
        record.logprob_max_abs_diff = ratios.max_abs_diff;
        record.importance_ratio = ratios.mean_ratio;
        record.importance_ratio_max = ratios.max_ratio;
        record.kl_behaviour_current = ratios.kl_behaviour_current;
        // Mini-batches of whole groups, in task order.
        let mut tasks: Vec<&str> = kept.iter().map(|(t, _)| t.task_id.as_str()).collect();
        tasks.dedup();
        let per_batch = tasks.len().div_ceil(batches.max(1)).max(1);
        let (mut adv_sum, mut adv_rows) = (0.0f64, 0usize);
        let mut metrics: Vec<StepMetrics> = Vec::new();
        for chunk in tasks.chunks(per_batch) {
            let rows: Vec<&(Trajectory, f64)> = kept
                .iter()
                .filter(|(t, _)| {
                    chunk.contains(&t.task_id.as_str()) && !t.output.response_ids.is_empty()
                })
                .collect();
            if rows.is_empty() {
                continue;
            }
            let uids: Vec<String> = rows.iter().map(|(t, _)| t.task_id.clone()).collect();
            let sessions = session_keys(rows.iter().map(|(t, _)| t));
            let outputs = rows
                .iter()
                .map(|(t, r)| {
                    let mut o = t.output.clone();
                    o.reward_score = Some(*r);
                    o
                })
                .collect();
            let batch = TrainBatch::with_grpo_sessions(
                outputs,
                &uids,
                &sessions,
                self.config.rl.norm_adv_by_std,
            )?;
            if let Some(adv) = &batch.advantages {
                for a in adv {
                    adv_sum += a
                        .iter()
                        .find(|x| **x != 0.0)
                        .map_or(0.0, |x| f64::from(x.abs()));
                    adv_rows += 1;
                }
            }
            metrics.push(blocking(|| trainer.step(&batch))?);
        }
        record.mean_abs_advantage = adv_sum / adv_rows.max(1) as f64;
        let n = metrics.len().max(1) as f64;
        let mean = |f: fn(&StepMetrics) -> f64| metrics.iter().map(f).sum::<f64>() / n;
        if metrics.is_empty() {
            record.loss = f64::NAN;
            record.grad_norm = f64::NAN;
        } else {
            record.loss = mean(|m| m.loss);
            record.pg_loss = mean(|m| m.pg_loss);
            record.pg_clipfrac = mean(|m| m.pg_clipfrac);
            record.kl = mean(|m| m.kl);
            record.entropy = mean(|m| m.entropy);
            record.grad_norm = mean(|m| m.grad_norm);
            record.lr = mean(|m| m.lr);
            record.is_weight_mean = mean(|m| m.correction.is_mean);
            record.is_weight_max = metrics
                .iter()
                .map(|m| m.correction.is_max)
                .fold(0.0, f64::max);
            record.is_fraction_high = mean(|m| m.correction.is_fraction_high);
            record.rs_rejected_tokens = mean(|m| m.correction.rs_masked_fraction);
            record.rs_rejected_sequences = mean(|m| m.correction.rs_seq_masked_fraction);
        }
        Ok(record)
    }

    /// The whole run: demonstrations of `sft_tasks` by `demonstrator`, SFT, held-out
    /// evaluation, RL on `source`, the learning curve and `summary.json`. The policy is
    /// exported with [`Self::export`].
    pub async fn run(
        &mut self,
        demonstrator: Arc<dyn TokenGenerator>,
        sft_tasks: Vec<Task>,
        source: TaskSource,
        held_out: &[Task],
    ) -> Result<Summary> {
        let started = Instant::now();
        let resumed = self.resume.as_ref().map(|cp| cp.state.before);
        let before = match resumed {
            Some(Some(before)) => before,
            Some(None) => {
                return Err(Error::invalid_input(
                    "the checkpoint was written by Pipeline::rl without a held-out evaluation before RL: resume it with Pipeline::rl",
                ))
            }
            None => self.sft_and_evaluate(demonstrator, sft_tasks, &source, held_out).await?,
        };
        let rl = if self.config.rl.steps > 0 {
            self.rl_phase(source, held_out, Some(before)).await?
        } else {
            RlOutcome::default()
        };
        let mut curve = vec![(0, before.success)];
        curve.extend(&rl.curve);
        let mut reward_curve = vec![(0, before.reward)];
        reward_curve.extend(&rl.reward_curve);
        let train: Vec<(usize, f64)> = rl.steps.iter().map(|s| (s.step, s.success_rate)).collect();
        super::plot::plot_learning_curve(
            &self.out.join("learning_curve.png"),
            &curve,
            &train,
            self.config.rl.steps,
        )?;
        let after = curve.last().map_or(before.success, |c| c.1);
        let summary = Summary {
            mode: self.config.rl.mode,
            pipeline: self.config.rl.r#async,
            loss: self.config.rl.loss,
            held_out_tasks: held_out.len(),
            seed: self.config.seed,
            sft_only_success: before.success,
            rl_success: after,
            sft_only_reward: before.reward,
            rl_reward: reward_curve.last().map_or(before.reward, |c| c.1),
            improvement_points: (after - before.success) * 100.0,
            sft_final_nll: self.sft_losses.last().copied(),
            sft_steps: self.sft_losses.len(),
            sft_probes: self.sft_probes.clone(),
            curve,
            reward_curve,
            trainer_idle_ratio: rl.trainer_idle_ratio,
            rollout_idle_ratio: rl.rollout_idle_ratio,
            rl_wall_s: rl.wall_s,
            wall_s: started.elapsed().as_secs_f64(),
        };
        let text =
            serde_json::to_string_pretty(&summary).map_err(|e| Error::internal(e.to_string()))?;
        std::fs::write(self.out.join("summary.json"), text)
            .map_err(|e| Error::io("writing summary.json".to_owned(), e))?;
        Ok(summary)
    }

    /// Demonstrations and SFT (when there are SFT tasks and steps), then the held-out
    /// evaluation before RL.
    async fn sft_and_evaluate(
        &mut self,
        demonstrator: Arc<dyn TokenGenerator>,
        sft_tasks: Vec<Task>,
        source: &TaskSource,
        held_out: &[Task],
    ) -> Result<Evaluation> {
        if !sft_tasks.is_empty() && self.config.sft.steps > 0 {
            // Probed on tasks SFT does not train on (a policy solves the demonstrated ones from
            // memory long before it generalizes) and that are not held out: the RL tasks that
            // were not demonstrated.
            let demonstrated: std::collections::HashSet<&str> =
                sft_tasks.iter().map(|t| t.id.as_str()).collect();
            let probe: Vec<Task> = source
                .tasks()
                .iter()
                .filter(|t| !demonstrated.contains(t.id.as_str()))
                .cloned()
                .collect();
            let demos = self.demonstrations(demonstrator, sft_tasks).await?;
            let rows: Vec<AgentLoopOutput> = demos.into_iter().map(|t| t.output).collect();
            self.sft_to_target(&rows, &probe).await?;
        }
        self.evaluate(held_out, 0).await
    }

    /// Writes the policy as a Hugging Face folder (see [`super::export_hf`]), with the
    /// codec's end-of-turn token as `eos_token_id` and the tokenizer files of
    /// `tokenizer_dir`.
    pub fn export(&self, dir: &Path, tokenizer_dir: Option<&Path>) -> Result<()> {
        super::artifacts::export_hf(
            self.policy()?,
            self.spec.codec().eos_token_id(),
            tokenizer_dir,
            dir,
        )
    }
}

/// What the RL phase produced.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct RlOutcome {
    /// One record per trainer step.
    pub steps: Vec<StepRecord>,
    /// `(step, held-out success)` at every evaluation.
    pub curve: Vec<(usize, f64)>,
    /// `(step, held-out mean reward)` at every evaluation.
    pub reward_curve: Vec<(usize, f64)>,
    /// Share of the wall time the trainer waited for rollouts.
    pub trainer_idle_ratio: f64,
    /// Rollout workers' waiting share (async), or training time over wall time (sync).
    pub rollout_idle_ratio: f64,
    /// Wall time of the phase.
    pub wall_s: f64,
}

/// The GRPO session of each trajectory: the chains of one gateway session
/// (`extra_fields.gateway.session`) count once in their group (see
/// `TrainBatch::with_grpo_sessions`); any other rollout is a session of its own.
fn session_keys<'a>(trajectories: impl Iterator<Item = &'a Trajectory>) -> Vec<String> {
    trajectories
        .enumerate()
        .map(|(i, t)| {
            let gateway = t.output.extra_fields.get("gateway");
            match gateway.and_then(|g| g.get("session")?.as_str()) {
                Some(session) => format!("session {session}"),
                None => format!("row {i}"),
            }
        })
        .collect()
}
