//! The RL phase: sampling, weight syncs, trainer steps and run checkpoints.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use uniagent_core::agent::{TrainingUse, Trajectory};
use uniagent_core::runner::{RolloutPhase, RolloutSource};
use uniagent_core::{AgentLoopOutput, Error, Result, Task};

use crate::pipeline::checkpoint::{self, RunState};
use crate::pipeline::config::Mode;
use crate::pipeline::diagnostics::{
    mixed_groups, ratio_stats, sample_staleness, staleness_histogram,
};
use crate::pipeline::metrics::{ScheduledGroup, StepRecord};
use crate::pipeline::rollouter::{PendingGroups, RolloutPlan, RolloutSide, Rollouter};
use crate::pipeline::tasks::{TaskCursor, TaskSource};
use crate::rl::RolloutCorrection;
use crate::trainer::{OptimConfig, StepMetrics, TrainBatch, TrainMode, Trainer, TrainerConfig};

use super::{blocking, Evaluation, Pipeline};

/// The next `groups` groups of an async rollouter, in its order, each noted in `schedule`
/// with the weight version it started on.
async fn next_groups(
    rollouter: &mut Rollouter,
    groups: usize,
    schedule: &mut Vec<ScheduledGroup>,
) -> Result<Vec<Trajectory>> {
    let mut all = Vec::new();
    for _ in 0..groups {
        let group = rollouter
            .next()
            .await
            .ok_or_else(|| Error::invalid_input("the task source ran out during async RL"))?;
        schedule.push(ScheduledGroup {
            group: group.group,
            task: group.task,
            version: group.version,
        });
        all.extend(group.result?);
    }
    Ok(all)
}

/// Where a resumed run continues: a deterministic rollouter's own resume point (the cursor
/// before the groups it has not handed out, and those groups' schedule), else the task
/// source's cursor.
fn resume_point(
    deterministic: Option<&Rollouter>,
    source: &Mutex<TaskSource>,
) -> Result<(TaskCursor, Option<PendingGroups>)> {
    if let Some(r) = deterministic {
        let (cursor, pending) = r.resume_point()?;
        return Ok((cursor, Some(pending)));
    }
    let cursor = source
        .lock()
        .map_err(|_| Error::internal("task source lock poisoned"))?
        .cursor();
    Ok((cursor, None))
}

impl Pipeline {
    /// The RL phase: `rl.steps` trainer steps on groups of tasks from `source`, synchronous
    /// or fully async per `rl.mode`, evaluating `held_out` every `rl.eval_every` steps and
    /// after the last, and writing a run checkpoint every `checkpoint.every` steps. A resumed
    /// pipeline ([`Self::resume`]) starts after the checkpoint's step. Returns the step records
    /// and the held-out curve (of the whole run when resumed).
    pub async fn rl(&mut self, source: TaskSource, held_out: &[Task]) -> Result<RlOutcome> {
        self.rl_phase(source, held_out, None).await
    }

    pub(super) async fn rl_phase(
        &mut self,
        source: TaskSource,
        held_out: &[Task],
        before: Option<Evaluation>,
    ) -> Result<RlOutcome> {
        let c = self.config.rl.clone();
        let config = TrainerConfig {
            mode: TrainMode::Rl(c.objective()),
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
        let resume = self.resume.take();
        if c.use_kl_loss && resume.is_some() {
            return Err(Error::config(
                "trainer.rl.use_kl_loss: a run with a KL loss cannot be resumed yet (its \
                 reference, the policy RL started from, is not in the run checkpoint)",
            ));
        }
        let policy = self.take_policy()?;
        // verl's reference policy: the one RL starts from, frozen.
        let reference = match c.use_kl_loss {
            true => match policy.try_clone() {
                Ok(copy) => Some(copy),
                Err(e) => {
                    self.policy = Some(policy);
                    return Err(e);
                }
            },
            false => None,
        };
        let mut trainer =
            Trainer::new(policy, reference, config)?.with_rollout_correction(c.correction.clone());
        let mut source = source;
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
            let side = RolloutSide {
                generator: self.generator.clone(),
                spec: self.spec.clone(),
                source: source.clone(),
                sync: self.sync.clone(),
            };
            let pending = resumed.as_ref().and_then(|s| s.pending.clone());
            Some(Rollouter::start(side, plan, c.r#async, pending))
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
                let mut schedule = Vec::new();
                let ts = match &mut rollouter {
                    None => self.sample_step(&source).await?,
                    Some(r) => next_groups(r, groups_per_step, &mut schedule).await?,
                };
                let wait = t0.elapsed().as_secs_f64();
                trainer_idle += wait;
                // Every RL rollout is kept, also those the step drops (infrastructure failures).
                self.records.trajectories("rl", step, &ts)?;
                let t1 = Instant::now();
                let mut record = self.train_step(trainer, step, &ts, batches)?;
                record.schedule = schedule;
                record.rollout_wait_s = wait;
                record.tokens_per_s = record.sampled_tokens as f64 / wait.max(1e-9);
                record.rollouts_per_s = ts.len() as f64 / wait.max(1e-9);
                let sync_every = if is_async {
                    c.r#async.trigger_parameter_sync_step
                } else {
                    1
                };
                let synced = step % sync_every == 0;
                if synced {
                    let rollouter = rollouter.as_ref();
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
                let due = every > 0 && (step % every == 0 || step == c.steps);
                // A deterministic run continues on its schedule only from a sync: between two,
                // the generator's weights are not the trainer's.
                let deterministic = is_async && c.r#async.deterministic;
                if due && (synced || !deterministic) {
                    out.wall_s = prior_wall + started.elapsed().as_secs_f64();
                    let resume_at =
                        resume_point(rollouter.as_ref().filter(|_| deterministic), &source)?;
                    self.checkpoint(
                        trainer,
                        step,
                        resume_at,
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
            Some(r) => r.stop().await,
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
        (cursor, pending): (TaskCursor, Option<PendingGroups>),
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
            pending,
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
        let per_sample = sample_staleness(
            refs.iter()
                .filter_map(|t| t.output.weight_versions.as_deref()),
            current,
        );
        record.sample_staleness_hist = per_sample.hist;
        record.partial_resumes = per_sample.partial_resumes;
        record.resumed_samples = per_sample.resumed_samples;
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
        if ratios.tokens > 0 {
            record.logprob_max_abs_diff = Some(ratios.max_abs_diff);
            record.importance_ratio = Some(ratios.mean_ratio);
            record.importance_ratio_max = Some(ratios.max_ratio);
            record.kl_behaviour_current = Some(ratios.kl_behaviour_current);
        }
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
            let rl = &self.config.rl;
            let estimator = rl.adv_estimator.estimator(rl.norm_adv_by_std_in_grpo);
            let batch = TrainBatch::with_group_sessions(outputs, &uids, &sessions, estimator)?;
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
        record.mean_abs_advantage = (adv_rows > 0).then(|| adv_sum / adv_rows as f64);
        fill_trainer_metrics(&mut record, &metrics, &self.config.rl.correction);
        Ok(record)
    }
}

/// The trainer's figures of a step, averaged over its mini-batches (the largest importance
/// weight: the largest). A figure no mini-batch computed stays absent: none at all without a
/// trained mini-batch, KL only with a KL loss, the importance-weight figures only with
/// `correction.is`, the rejection figures only with `correction.rs`.
fn fill_trainer_metrics(
    record: &mut StepRecord,
    metrics: &[StepMetrics],
    correction: &RolloutCorrection,
) {
    let mean = |f: &dyn Fn(&StepMetrics) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = metrics.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    record.loss = mean(&|m| Some(m.loss));
    record.pg_loss = mean(&|m| Some(m.pg_loss));
    record.pg_clipfrac = mean(&|m| Some(m.pg_clipfrac));
    record.grad_norm = mean(&|m| Some(m.grad_norm));
    record.lr = mean(&|m| Some(m.lr));
    record.kl = mean(&|m| m.kl);
    record.entropy = mean(&|m| m.entropy);
    if correction.is.is_some() {
        record.is_weight_mean = mean(&|m| m.correction.map(|c| c.is_mean));
        record.is_weight_max = metrics
            .iter()
            .filter_map(|m| m.correction.map(|c| c.is_max))
            .reduce(f64::max);
        record.is_fraction_high = mean(&|m| m.correction.map(|c| c.is_fraction_high));
    }
    if !correction.rs.is_empty() {
        record.rs_rejected_tokens = mean(&|m| m.correction.map(|c| c.rs_masked_fraction));
        record.rs_rejected_sequences = mean(&|m| m.correction.map(|c| c.rs_seq_masked_fraction));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::CorrectionMetrics;

    fn step(entropy: f64, kl: Option<f64>, correction: Option<CorrectionMetrics>) -> StepMetrics {
        StepMetrics {
            loss: 1.0,
            pg_loss: 0.5,
            pg_clipfrac: 0.1,
            grad_norm: 2.0,
            lr: 1e-3,
            tokens: 10,
            entropy: Some(entropy),
            kl,
            correction,
        }
    }

    fn line(record: &StepRecord) -> serde_json::Value {
        serde_json::to_value(record).unwrap_or_default()
    }

    const CORRECTION_KEYS: [&str; 5] = [
        "is_weight_mean",
        "is_weight_max",
        "is_fraction_high",
        "rs_rejected_tokens",
        "rs_rejected_sequences",
    ];

    #[test]
    fn figures_not_computed_are_absent_not_zero() {
        // No mini-batch trained: no trainer figure at all.
        let mut r = StepRecord::default();
        fill_trainer_metrics(&mut r, &[], &RolloutCorrection::default());
        let v = line(&r);
        for key in ["loss", "pg_loss", "grad_norm", "lr", "kl", "entropy"] {
            assert!(v.get(key).is_none(), "{key} in {v}");
        }

        // Entropy always (also with coefficient 0), averaged; no KL term, no correction.
        let mut r = StepRecord::default();
        let metrics = [step(1.0, None, None), step(3.0, None, None)];
        fill_trainer_metrics(&mut r, &metrics, &RolloutCorrection::default());
        assert_eq!(r.entropy, Some(2.0));
        assert_eq!((r.loss, r.grad_norm), (Some(1.0), Some(2.0)));
        let v = line(&r);
        assert_eq!(v["entropy"], 2.0);
        for key in CORRECTION_KEYS.iter().chain(&["kl"]) {
            assert!(v.get(*key).is_none(), "{key} in {v}");
        }

        // A KL loss reports KL, even when it is exactly 0 (policy == reference).
        let mut r = StepRecord::default();
        fill_trainer_metrics(
            &mut r,
            &[step(1.0, Some(0.0), None)],
            &RolloutCorrection::default(),
        );
        assert_eq!(line(&r)["kl"], 0.0);

        // Importance weighting only: its figures, not the rejection ones.
        let c = CorrectionMetrics {
            is_mean: 0.9,
            is_max: 1.5,
            is_fraction_high: 0.25,
            ..CorrectionMetrics::default()
        };
        let weights = [
            step(1.0, None, Some(c)),
            step(1.0, None, Some(CorrectionMetrics { is_max: 2.5, ..c })),
        ];
        let mut r = StepRecord::default();
        fill_trainer_metrics(&mut r, &weights, &RolloutCorrection::token_tis(2.0));
        assert_eq!(
            (r.is_weight_mean, r.is_weight_max, r.is_fraction_high),
            (Some(0.9), Some(2.5), Some(0.25))
        );
        assert_eq!(
            (r.rs_rejected_tokens, r.rs_rejected_sequences),
            (None, None)
        );

        // Rejection only: the other way round, a rejected share of 0 included.
        let mut r = StepRecord::default();
        fill_trainer_metrics(
            &mut r,
            &[step(1.0, None, Some(CorrectionMetrics::default()))],
            &RolloutCorrection::geo_rs(0.5, 2.0),
        );
        assert_eq!(
            (r.rs_rejected_tokens, r.rs_rejected_sequences),
            (Some(0.0), Some(0.0))
        );
        assert_eq!(r.is_weight_mean, None);
    }

    #[test]
    fn a_record_without_optional_figures_reads_back() {
        let r = StepRecord {
            step: 3,
            entropy: Some(1.25),
            ..StepRecord::default()
        };
        let text = serde_json::to_string(&r).unwrap_or_default();
        let back: StepRecord = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back, r);
    }
}
