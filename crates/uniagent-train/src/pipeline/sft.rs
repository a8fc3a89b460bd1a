//! The SFT phase: masked NLL of the demonstrations' sampled tokens, for `sft.steps` steps or,
//! with `sft.target`, on until the policy solves enough tasks it was not trained on.

use uniagent_core::{AgentLoopOutput, Result, Task};

use super::run::{blocking, Pipeline};
use crate::trainer::{OptimConfig, TrainBatch, TrainMode, Trainer, TrainerConfig};

/// What [`Pipeline::sft_to_target`] did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SftOutcome {
    /// The loss of every step.
    pub losses: Vec<f64>,
    /// `(step, success rate)` of every probe (empty without a target).
    pub probes: Vec<(usize, f64)>,
}

/// SFT in progress: the trainer and where it is in its seeded epoch order, so that training
/// in several stretches draws the same batches as one long run.
struct SftRun {
    trainer: Trainer,
    rng: fastrand::Rng,
    order: Vec<usize>,
    cursor: usize,
    batch_size: usize,
}

impl SftRun {
    /// `n` more steps on `rows`; each step's loss is pushed to `losses`.
    fn steps(&mut self, rows: &[AgentLoopOutput], n: usize, losses: &mut Vec<f64>) -> Result<()> {
        for _ in 0..n {
            let mut batch = Vec::with_capacity(self.batch_size);
            while batch.len() < self.batch_size.min(rows.len()) {
                if self.cursor == self.order.len() {
                    self.rng.shuffle(&mut self.order);
                    self.cursor = 0;
                }
                batch.push(rows[self.order[self.cursor]].clone());
                self.cursor += 1;
            }
            let trainer = &mut self.trainer;
            let m = blocking(|| trainer.step(&TrainBatch::sft(batch)))?;
            tracing::debug!(step = losses.len() + 1, nll = m.loss, "sft step");
            losses.push(m.loss);
        }
        Ok(())
    }
}

impl Pipeline {
    fn sft_run(&mut self, rows: usize) -> Result<SftRun> {
        let c = &self.config.sft;
        let config = TrainerConfig {
            mode: TrainMode::Sft,
            optim: OptimConfig {
                lr: c.lr,
                weight_decay: 0.0,
                ..OptimConfig::default()
            },
            micro_batch_size: c.micro_batch_size,
            ..TrainerConfig::default()
        };
        let batch_size = c.batch_size;
        Ok(SftRun {
            trainer: Trainer::new(self.take_policy()?, None, config)?,
            rng: fastrand::Rng::with_seed(self.config.seed ^ 0x5f7),
            order: (0..rows).collect(),
            cursor: rows,
            batch_size,
        })
    }

    /// Puts the trained policy back and stages its weights (the in-process engine takes them
    /// at once; a server at the next [`Self::commit_pending`]); then `result`.
    fn sft_finish(&mut self, run: SftRun, result: Result<()>, losses: &[f64]) -> Result<()> {
        let policy = run.trainer.into_policy();
        let synced = self.sync.stage(&policy);
        self.sync_pending = synced.is_ok();
        self.policy = Some(policy);
        result?;
        synced?;
        tracing::info!(
            steps = losses.len(),
            nll = losses.last().copied(),
            "sft done"
        );
        self.sft_losses = losses.to_vec();
        Ok(())
    }

    /// SFT on `rows` (masked NLL of the sampled tokens): `sft.steps` steps of `sft.batch_size`
    /// rows drawn epoch by epoch in a seeded order; then the weights are staged for the
    /// generator (which uses them from the next evaluation or RL phase on). Ignores
    /// `sft.target` (see [`Self::sft_to_target`]). Returns the loss of every step.
    pub fn sft(&mut self, rows: &[AgentLoopOutput]) -> Result<Vec<f64>> {
        let steps = self.config.sft.steps;
        if rows.is_empty() || steps == 0 {
            return Ok(Vec::new());
        }
        let mut run = self.sft_run(rows.len())?;
        let mut losses = Vec::with_capacity(steps);
        let result = run.steps(rows, steps, &mut losses);
        self.sft_finish(run, result, &losses)?;
        Ok(losses)
    }

    /// SFT as [`Self::sft`]; then, with `sft.target`, greedy rollouts of the first
    /// `target.probe_tasks` of `probe` (recorded as phase `sft_probe`) every
    /// `target.probe_every` steps, stopping once their success rate reaches `target.success`
    /// or after `target.max_steps` steps. The batches drawn are those of one long run.
    ///
    /// `probe` should be tasks SFT does not train on (a policy solves the demonstrated ones
    /// from memory long before it generalizes) and that are not held out: the RL tasks.
    pub async fn sft_to_target(
        &mut self,
        rows: &[AgentLoopOutput],
        probe: &[Task],
    ) -> Result<SftOutcome> {
        let Some(target) = self.config.sft.target.clone() else {
            let losses = self.sft(rows)?;
            return Ok(SftOutcome {
                losses,
                probes: Vec::new(),
            });
        };
        let steps = self.config.sft.steps;
        if rows.is_empty() || steps == 0 {
            return Ok(SftOutcome::default());
        }
        let probe_tasks = &probe[..probe.len().min(target.probe_tasks)];
        let mut run = self.sft_run(rows.len())?;
        let mut losses = Vec::with_capacity(target.max_steps);
        let mut probes = Vec::new();
        let result = async {
            let mut until = steps;
            loop {
                run.steps(rows, until - losses.len(), &mut losses)?;
                if probe_tasks.is_empty() {
                    return Ok(());
                }
                self.sync.stage(run.trainer.policy())?;
                self.sync.commit().await?;
                let done = losses.len();
                let probe = self.evaluate_as("sft_probe", probe_tasks, done).await?;
                tracing::info!(
                    step = done,
                    success = probe.success,
                    target = target.success,
                    "sft probe"
                );
                probes.push((done, probe.success));
                if probe.success >= target.success || done >= target.max_steps {
                    return Ok(());
                }
                until = (done + target.probe_every).min(target.max_steps);
            }
        }
        .await;
        self.sft_probes.clone_from(&probes);
        self.sft_finish(run, result, &losses)?;
        self.commit_pending().await?;
        Ok(SftOutcome { losses, probes })
    }

    /// Makes the generator use weights staged by SFT, if any (a no-op for the in-process
    /// engine, a reload for an inference server).
    pub(super) async fn commit_pending(&mut self) -> Result<()> {
        if self.sync_pending {
            let version = self.sync.commit().await?;
            self.sync_pending = false;
            tracing::info!(version, sync = self.sync.name(), "sft weights committed");
        }
        Ok(())
    }
}
