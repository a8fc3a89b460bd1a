//! The run's records: one [`StepRecord`] per RL step in `metrics.jsonl` (and through
//! `tracing`), trajectories tagged with their phase in `trajectories.jsonl`, the [`Summary`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use uniagent_core::agent::Trajectory;
use uniagent_core::formats::trajectories;
use uniagent_core::{Error, Result};

use super::checkpoint::RecordOffsets;
use super::config::{AsyncConfig, Mode};
use crate::rl::PolicyLossMode;

/// What one RL step measured.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepRecord {
    /// Trainer step (1-based).
    pub step: usize,
    /// The generator's weight version after this step's sync.
    pub weight_version: u64,
    /// Mean reward of the step's rollouts (as trained on: reward-0 failures count as 0).
    pub mean_reward: f64,
    /// Share of the step's rollouts that succeeded.
    pub success_rate: f64,
    /// Held-out success, on steps that evaluate.
    pub held_out_success: Option<f64>,
    /// Total loss (mean over the step's mini-batches; absent when no row was trained on:
    /// every rollout dropped or without sampled tokens, as for every trainer figure below).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Policy-gradient part of the loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pg_loss: Option<f64>,
    /// Fraction of tokens clipped by the policy loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pg_clipfrac: Option<f64>,
    /// KL to the reference; present only with a KL loss (`use_kl_loss`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl: Option<f64>,
    /// Entropy of the policy over the trained response tokens, measured at every step whatever
    /// `entropy_coeff` (only a non-zero coefficient puts it in the loss).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entropy: Option<f64>,
    /// Gradient norm before clipping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
    /// Learning rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// Largest |trainer − rollout| log-prob over the sampled tokens (before the update);
    /// this and the next three are absent when no trained row has rollout log-probs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprob_max_abs_diff: Option<f64>,
    /// Mean importance ratio π_trainer / π_rollout (before the update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub importance_ratio: Option<f64>,
    /// Largest importance ratio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub importance_ratio_max: Option<f64>,
    /// KL(behaviour ‖ current) on the sampled tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_behaviour_current: Option<f64>,
    /// Rollout correction: mean applied importance weight; this and the next two are present
    /// only with importance weighting (`rollout_correction.is`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_weight_mean: Option<f64>,
    /// Rollout correction: largest importance weight (or sequence ratio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_weight_max: Option<f64>,
    /// Rollout correction: share of ratios above the truncation threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_fraction_high: Option<f64>,
    /// Rollout correction: share of tokens rejected; this and the next are present only with
    /// rejection sampling (`rollout_correction.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_rejected_tokens: Option<f64>,
    /// Rollout correction: share of sequences with a rejected token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_rejected_sequences: Option<f64>,
    /// Share of groups whose rewards differ.
    pub mixed_groups: f64,
    /// Mean |advantage| over the trained rows (absent when none was trained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_abs_advantage: Option<f64>,
    /// Tokens sampled by the policy in the step's rollouts.
    pub sampled_tokens: u64,
    /// Sampled tokens per second of waiting for rollouts.
    pub tokens_per_s: f64,
    /// Rollouts per second of waiting for rollouts.
    pub rollouts_per_s: f64,
    /// Seconds the trainer waited for rollouts.
    pub rollout_wait_s: f64,
    /// Seconds of training (diagnostics, optimizer steps, weight sync).
    pub train_s: f64,
    /// Seconds of the weight sync.
    pub sync_s: f64,
    /// Largest staleness (trained version − token version) of a sampled token.
    pub staleness: u64,
    /// Staleness → sampled tokens.
    pub staleness_hist: BTreeMap<u64, usize>,
    /// Staleness → trained samples, a sample's staleness being that of the oldest weights it
    /// sampled with (the version its rollout started on).
    #[serde(default)]
    pub sample_staleness_hist: BTreeMap<u64, usize>,
    /// Partial-rollout resumes in the trained samples: each time a rollout went on with newer
    /// weights after a sync (0 in sync runs and without `partial_rollout`).
    #[serde(default)]
    pub partial_resumes: usize,
    /// Trained samples that resumed at least once.
    #[serde(default)]
    pub resumed_samples: usize,
    /// Rollouts dropped by the training policy (infrastructure failures).
    pub dropped: usize,
    /// Exit reason → rollouts.
    pub exit_reasons: BTreeMap<String, usize>,
    /// Async runs: the groups the step trained on, in order, with the weight version each
    /// started on (deterministic runs: the schedule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<ScheduledGroup>,
}

/// One group an async step trained on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledGroup {
    /// Its index in the RL phase (0: the first group drawn).
    pub group: usize,
    /// The task.
    pub task: String,
    /// The generator's weight version when the group started.
    pub version: u64,
}

/// The outcome of a whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Sync or async.
    pub mode: Mode,
    /// The async knobs.
    pub pipeline: AsyncConfig,
    /// Policy loss (verl's name; `grpo` in earlier summaries reads as `vanilla`).
    pub loss: PolicyLossMode,
    /// Held-out tasks evaluated.
    pub held_out_tasks: usize,
    /// The run's seed.
    pub seed: u64,
    /// Held-out success before RL.
    pub sft_only_success: f64,
    /// Held-out success after RL.
    pub rl_success: f64,
    /// Held-out mean reward before RL.
    pub sft_only_reward: f64,
    /// Held-out mean reward after RL.
    pub rl_reward: f64,
    /// `(rl_success − sft_only_success) · 100`.
    pub improvement_points: f64,
    /// The last SFT step's loss.
    pub sft_final_nll: Option<f64>,
    /// SFT steps done (more than `sft.steps` when a target kept it going).
    pub sft_steps: usize,
    /// `(step, success on the probe tasks)` of every SFT target probe.
    pub sft_probes: Vec<(usize, f64)>,
    /// `(step, held-out success)` at every evaluation.
    pub curve: Vec<(usize, f64)>,
    /// `(step, held-out mean reward)` at every evaluation.
    pub reward_curve: Vec<(usize, f64)>,
    /// Share of RL wall time the trainer waited for rollouts.
    pub trainer_idle_ratio: f64,
    /// Share of rollout-worker time spent waiting (async), or training time over wall (sync).
    pub rollout_idle_ratio: f64,
    /// RL phase wall time.
    pub rl_wall_s: f64,
    /// Whole run wall time.
    pub wall_s: f64,
}

/// Appends JSON lines to the run's files.
#[derive(Debug)]
pub(crate) struct Records {
    trajectories: File,
    metrics: File,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(what.to_owned(), e)
}

impl Records {
    /// Creates (truncates) `trajectories.jsonl` and `metrics.jsonl` in `out`.
    pub(crate) fn create(out: &Path) -> Result<Self> {
        std::fs::create_dir_all(out).map_err(io("creating the output directory"))?;
        Ok(Self {
            trajectories: File::create(out.join(trajectories::FILE_NAME))
                .map_err(io("creating trajectories.jsonl"))?,
            metrics: File::create(out.join("metrics.jsonl"))
                .map_err(io("creating metrics.jsonl"))?,
        })
    }

    /// Opens the records of an interrupted run for appending, cut to `offsets` (what the
    /// checkpoint saw: later lines, maybe half a line from the kill, are dropped).
    pub(crate) fn reopen(out: &Path, offsets: RecordOffsets) -> Result<Self> {
        let open = |name: &str, len: u64| -> Result<File> {
            let path = out.join(name);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
            let have = file
                .metadata()
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
                .len();
            if have < len {
                return Err(Error::invalid_input(format!(
                    "{} has {have} bytes, fewer than the {len} its checkpoint recorded",
                    path.display()
                )));
            }
            file.set_len(len)
                .map_err(|e| Error::io(format!("truncating {}", path.display()), e))?;
            let mut file = file;
            file.seek(SeekFrom::End(0))
                .map_err(|e| Error::io(format!("seeking {}", path.display()), e))?;
            Ok(file)
        };
        Ok(Self {
            trajectories: open(trajectories::FILE_NAME, offsets.trajectories)?,
            metrics: open("metrics.jsonl", offsets.metrics)?,
        })
    }

    /// The byte lengths written so far (records are unbuffered: every line is on disk).
    pub(crate) fn offsets(&mut self) -> Result<RecordOffsets> {
        Ok(RecordOffsets {
            trajectories: self
                .trajectories
                .stream_position()
                .map_err(io("locating trajectories.jsonl"))?,
            metrics: self
                .metrics
                .stream_position()
                .map_err(io("locating metrics.jsonl"))?,
        })
    }

    /// One line per trajectory, tagged with `phase` and `step`.
    pub(crate) fn trajectories(
        &mut self,
        phase: &str,
        step: usize,
        ts: &[Trajectory],
    ) -> Result<()> {
        for t in ts {
            let mut record = trajectories::record(t);
            trajectories::tag(&mut record, phase, step);
            self.trajectories
                .write_all(&trajectories::to_line(&record)?)
                .map_err(io("writing trajectories.jsonl"))?;
        }
        Ok(())
    }

    /// One line for a step, also logged through `tracing`.
    pub(crate) fn step(&mut self, r: &StepRecord) -> Result<()> {
        tracing::info!(
            step = r.step,
            reward = r.mean_reward,
            success = r.success_rate,
            loss = r.loss,
            grad_norm = r.grad_norm,
            ratio = r.importance_ratio,
            entropy = r.entropy,
            staleness = r.staleness,
            held_out = r.held_out_success,
            "rl step"
        );
        let value = serde_json::to_value(r).map_err(|e| Error::internal(e.to_string()))?;
        crate::telemetry::publish_step(&value);
        writeln!(self.metrics, "{value}").map_err(io("writing metrics.jsonl"))
    }
}
