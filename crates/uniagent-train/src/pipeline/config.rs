//! The pipeline's configuration: every knob in serde structs (`deny_unknown_fields`), loaded
//! from YAML or TOML; names that select behaviour are enums, checked when the file is read.

use serde::{Deserialize, Serialize};
use uniagent_core::{Error, Result};

use super::emulation::GenerationEmulation;
use crate::rl::{
    AdvEstimator, ClipConfig, KlEstimator, KlKind, LossAggMode, PolicyLossMode, RolloutCorrection,
};
use crate::trainer::{KlLossConfig, RlObjective};

/// The whole run: SFT, RL, rollouts, engine.
///
/// ```
/// use uniagent_train::pipeline::{Mode, PipelineConfig};
/// use uniagent_train::rl::PolicyLossMode;
/// let c = PipelineConfig::from_toml_str("seed = 3\n[rl]\nmode = \"async\"\nloss_mode = \"gspo\"\n").unwrap();
/// assert_eq!((c.seed, c.rl.mode, c.rl.loss_mode), (3, Mode::Async, PolicyLossMode::Gspo));
/// let y = PipelineConfig::from_yaml_str("rl:\n  async:\n    staleness_threshold: 1.0\n").unwrap();
/// assert_eq!(y.rl.r#async.staleness_threshold, 1.0);
/// assert!(PipelineConfig::from_toml_str("[rl]\nloss_mode = \"ppo2\"\n").is_err());
/// assert!(PipelineConfig::from_toml_str("sed = 3\n").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// Seed of data order, initialisation and sampling.
    pub seed: u64,
    /// The supervised warm start.
    pub sft: SftConfig,
    /// Reinforcement learning on the policy's own rollouts.
    pub rl: RlConfig,
    /// Rollouts (host or container sandboxes) in flight at once.
    pub max_concurrent_rollouts: usize,
    /// Most requests the generation engine decodes together.
    pub engine_batch: usize,
    /// libtorch intra-op threads (fixed, so that a seed gives the same numbers).
    pub torch_threads: usize,
    /// Run checkpoints of the RL phase, to resume a killed run.
    pub checkpoint: CheckpointConfig,
    /// Benchmarks only: every generation call lasts as long as on a separate inference
    /// device ([`GenerationEmulation`]); absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_emulation: Option<GenerationEmulation>,
    /// Where the in-process generation engine keeps its copy of the policy: `cpu`, `cuda` or
    /// `cuda:N`; absent: the policy's own device. A second GPU lets generation and training
    /// run on separate devices, which is where async RL pays; weight syncs copy across.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_device: Option<String>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            seed: 7,
            sft: SftConfig::default(),
            rl: RlConfig::default(),
            max_concurrent_rollouts: 8,
            engine_batch: 64,
            torch_threads: 1,
            checkpoint: CheckpointConfig::default(),
            generation_emulation: None,
            generation_device: None,
        }
    }
}

impl PipelineConfig {
    /// Parses TOML (unknown keys are errors).
    pub fn from_toml_str(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| Error::config(format!("pipeline config (TOML): {e}")))
    }

    /// Parses YAML (unknown keys are errors).
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        uniagent_core::config::check_nesting(text)
            .map_err(|e| Error::config(format!("pipeline config (YAML): {e}")))?;
        serde_norway::from_str(text)
            .map_err(|e| Error::config(format!("pipeline config (YAML): {e}")))
    }

    /// Checks ranges; the message names the bad field.
    pub fn validate(&self) -> Result<()> {
        if let Some(device) = &self.generation_emulation {
            device.validate()?;
        }
        if let Some(device) = &self.generation_device {
            parse_device(device)?;
        }
        let positive = [
            ("sft.batch_size", self.sft.batch_size),
            ("sft.micro_batch_size", self.sft.micro_batch_size),
            ("rl.tasks_per_step", self.rl.tasks_per_step),
            ("rl.micro_batch_size", self.rl.micro_batch_size),
            (
                "rl.async.trigger_parameter_sync_step",
                self.rl.r#async.trigger_parameter_sync_step,
            ),
            ("rl.async.require_batches", self.rl.r#async.require_batches),
            ("max_concurrent_rollouts", self.max_concurrent_rollouts),
            ("engine_batch", self.engine_batch),
            ("torch_threads", self.torch_threads),
            ("checkpoint.keep", self.checkpoint.keep),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(Error::config(format!("{name} must be >= 1")));
            }
        }
        if self.rl.group_size == 0 {
            return Err(Error::config("rl.group_size must be >= 1"));
        }
        let a = &self.rl.r#async;
        if !(a.staleness_threshold.is_finite() && a.staleness_threshold >= 0.0) {
            return Err(Error::config("rl.async.staleness_threshold must be >= 0"));
        }
        for (name, v) in [("sft.lr", self.sft.lr), ("rl.lr", self.rl.lr)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(format!("{name} must be a finite value >= 0")));
            }
        }
        if let Some(t) = &self.sft.target {
            if !(t.success.is_finite() && (0.0..=1.0).contains(&t.success)) {
                return Err(Error::config("sft.target.success must be between 0 and 1"));
            }
            for (name, v) in [
                ("sft.target.probe_tasks", t.probe_tasks),
                ("sft.target.probe_every", t.probe_every),
            ] {
                if v == 0 {
                    return Err(Error::config(format!("{name} must be >= 1")));
                }
            }
            if t.max_steps < self.sft.steps {
                return Err(Error::config(format!(
                    "sft.target.max_steps ({}) must be at least sft.steps ({})",
                    t.max_steps, self.sft.steps
                )));
            }
        }
        if !(self.rl.temperature.is_finite() && self.rl.temperature > 0.0) {
            return Err(Error::config("rl.temperature must be > 0"));
        }
        self.rl.validate_objective()
    }
}

/// When the RL phase writes a run checkpoint (`checkpoints/step-N/` in the run folder: policy,
/// optimizer moments, step, task cursor, weight version and the records so far) that
/// [`Pipeline::resume`](super::Pipeline::resume) continues from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// Every this many RL steps, and after the last (0: never).
    pub every: usize,
    /// Checkpoints kept (the newest; older ones are deleted once a newer one is complete).
    pub keep: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self { every: 5, keep: 2 }
    }
}

/// The SFT phase: masked NLL of the demonstrations' sampled tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftConfig {
    /// Optimizer steps.
    pub steps: usize,
    /// Rows per step (drawn in a seeded shuffled order, epoch after epoch).
    pub batch_size: usize,
    /// Learning rate (constant, no weight decay).
    pub lr: f64,
    /// Rows per forward/backward pass.
    pub micro_batch_size: usize,
    /// Keep training past `steps` until the policy reaches a success rate on tasks it is not
    /// trained on (none: exactly `steps`). A tiny policy's warm start depends much on its seed at a
    /// fixed step count; a target makes every seed start RL from a comparable policy.
    pub target: Option<SftTarget>,
}

impl Default for SftConfig {
    fn default() -> Self {
        Self {
            steps: 150,
            batch_size: 16,
            lr: 3e-3,
            micro_batch_size: 16,
            target: None,
        }
    }
}

/// When SFT may stop: after `steps`, greedy rollouts of `probe_tasks` tasks SFT does not train
/// on (the pipeline takes the first RL tasks; never held-out ones) every `probe_every` steps
/// until their success rate is at least `success` or `max_steps` are done.
///
/// ```
/// use uniagent_train::pipeline::PipelineConfig;
/// let c = PipelineConfig::from_yaml_str("sft:\n  steps: 100\n  target: {success: 0.3}\n").unwrap();
/// let target = c.sft.target.unwrap();
/// assert_eq!((target.success, target.probe_tasks, target.probe_every, target.max_steps), (0.3, 32, 25, 400));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftTarget {
    /// Success rate on the probe tasks at which SFT stops (0 to 1).
    pub success: f64,
    /// Demonstrated tasks probed (the first ones).
    pub probe_tasks: usize,
    /// Steps between probes once `steps` are done.
    pub probe_every: usize,
    /// Steps at most, probes or not.
    pub max_steps: usize,
}

impl Default for SftTarget {
    fn default() -> Self {
        Self {
            success: 0.3,
            probe_tasks: 32,
            probe_every: 25,
            max_steps: 400,
        }
    }
}

/// How rollouts and training alternate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Roll out a batch, train on it, sync the weights, repeat.
    Sync,
    /// verl's `fully_async`: a rollouter keeps producing groups while the trainer trains.
    Async,
}

/// The RL phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlConfig {
    /// Trainer steps.
    pub steps: usize,
    /// Tasks per optimizer step (each sampled `group_size` times).
    pub tasks_per_step: usize,
    /// GRPO group size.
    pub group_size: u32,
    /// Learning rate (constant, no weight decay).
    pub lr: f64,
    /// The policy loss (verl's `actor.policy_loss.loss_mode`: `vanilla`, `gspo`, `cispo`).
    /// Read from `loss` too, the earlier key, where `grpo` names `vanilla`.
    #[serde(alias = "loss")]
    pub loss_mode: PolicyLossMode,
    /// The outcome advantage estimator (verl's `algorithm.adv_estimator`: `grpo`, `rloo`,
    /// `reinforce_plus_plus_baseline`).
    pub adv_estimator: AdvEstimator,
    /// GRPO advantages divided by the group's standard deviation (false: Dr.GRPO). Read from
    /// `norm_adv_by_std` too, the earlier key.
    #[serde(alias = "norm_adv_by_std")]
    pub norm_adv_by_std_in_grpo: bool,
    /// Ratios below `1 − clip_ratio_low` are clipped.
    pub clip_ratio_low: f64,
    /// Ratios above `1 + clip_ratio_high` are clipped.
    pub clip_ratio_high: f64,
    /// The dual-clip bound for negative advantages (`vanilla` only), > 1.
    pub clip_ratio_c: f64,
    /// How token losses are aggregated (`token-mean`, `token-sum`, `seq-mean-token-sum`,
    /// `seq-mean-token-sum-norm`, `seq-mean-token-mean`).
    pub loss_agg_mode: LossAggMode,
    /// A KL penalty to the reference policy (the policy RL starts from) in the loss.
    pub use_kl_loss: bool,
    /// The KL penalty's coefficient.
    pub kl_loss_coef: f64,
    /// The KL estimator (`kl`, `abs`, `mse`, `low_var_kl`, each with an optional `+` for the
    /// straight-through gradient).
    pub kl_loss_type: KlEstimator,
    /// The entropy bonus coefficient (`loss −= entropy_coeff · entropy`).
    pub entropy_coeff: f64,
    /// Sampling temperature of RL rollouts (evaluation is greedy).
    pub temperature: f64,
    /// Rows per forward/backward pass.
    pub micro_batch_size: usize,
    /// Evaluate the held-out tasks every this many steps (and after the last); 0: only at the
    /// end.
    pub eval_every: usize,
    /// Sync or fully async.
    pub mode: Mode,
    /// The fully-async knobs (verl's names), used in [`Mode::Async`].
    pub r#async: AsyncConfig,
    /// Rollout correction (decoupled PPO with verl's `rollout_corr` weights and rejection);
    /// when set, the engine reports processed logprobs (the behaviour policy).
    pub correction: RolloutCorrection,
}

impl Default for RlConfig {
    /// verl's defaults for the objective (vanilla loss, GRPO advantages divided by the std,
    /// clip 0.2/0.2/3.0, token-mean, no KL loss, no entropy bonus).
    fn default() -> Self {
        let clip = ClipConfig::default();
        Self {
            steps: 40,
            tasks_per_step: 8,
            group_size: 8,
            lr: 5e-4,
            loss_mode: PolicyLossMode::Vanilla,
            adv_estimator: AdvEstimator::Grpo,
            norm_adv_by_std_in_grpo: true,
            clip_ratio_low: clip.clip_ratio_low,
            clip_ratio_high: clip.clip_ratio_high,
            clip_ratio_c: clip.clip_ratio_c,
            loss_agg_mode: LossAggMode::TokenMean,
            use_kl_loss: false,
            kl_loss_coef: 0.001,
            kl_loss_type: KlEstimator::plain(KlKind::K3),
            entropy_coeff: 0.0,
            temperature: 0.5,
            micro_batch_size: 16,
            eval_every: 5,
            mode: Mode::Sync,
            r#async: AsyncConfig::default(),
            correction: RolloutCorrection::default(),
        }
    }
}

impl RlConfig {
    /// The trainer's objective from these knobs.
    ///
    /// ```
    /// use uniagent_train::pipeline::PipelineConfig;
    /// use uniagent_train::rl::{LossAggMode, PolicyLossMode};
    /// let yaml = "rl:\n  loss_mode: gspo\n  loss_agg_mode: seq-mean-token-mean\n  \
    ///             clip_ratio_high: 0.28\n  use_kl_loss: true\n  kl_loss_type: low_var_kl+\n";
    /// let objective = PipelineConfig::from_yaml_str(yaml)?.rl.objective();
    /// assert_eq!(objective.loss_mode, PolicyLossMode::Gspo);
    /// assert_eq!(objective.agg, LossAggMode::SeqMeanTokenMean);
    /// assert_eq!(objective.clip.clip_ratio_high, 0.28);
    /// assert!(objective.kl.unwrap().estimator.straight_through);
    /// # Ok::<(), uniagent_core::Error>(())
    /// ```
    pub fn objective(&self) -> RlObjective {
        RlObjective {
            loss_mode: self.loss_mode,
            clip: ClipConfig {
                clip_ratio_low: self.clip_ratio_low,
                clip_ratio_high: self.clip_ratio_high,
                clip_ratio_c: self.clip_ratio_c,
            },
            agg: self.loss_agg_mode,
            kl: self.use_kl_loss.then_some(KlLossConfig {
                coef: self.kl_loss_coef,
                estimator: self.kl_loss_type,
            }),
            entropy_coeff: self.entropy_coeff,
        }
    }

    /// Checks the objective's knobs; the message names the bad field.
    fn validate_objective(&self) -> Result<()> {
        for (name, v) in [
            ("rl.clip_ratio_low", self.clip_ratio_low),
            ("rl.clip_ratio_high", self.clip_ratio_high),
            ("rl.kl_loss_coef", self.kl_loss_coef),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(format!("{name} must be a finite value >= 0")));
            }
        }
        if !(self.clip_ratio_c.is_finite() && self.clip_ratio_c > 1.0) {
            return Err(Error::config(
                "rl.clip_ratio_c must be > 1 (the dual-clip bound of negative advantages)",
            ));
        }
        if !self.entropy_coeff.is_finite() {
            return Err(Error::config("rl.entropy_coeff must be finite"));
        }
        Ok(())
    }
}

/// A libtorch device by name: `cpu`, `cuda` (the first GPU) or `cuda:N`.
///
/// ```
/// use uniagent_train::pipeline::parse_device;
/// use tch::Device;
/// assert_eq!(parse_device("cuda:1").unwrap(), Device::Cuda(1));
/// assert_eq!(parse_device("cpu").unwrap(), Device::Cpu);
/// assert!(parse_device("gpu").is_err());
/// ```
pub fn parse_device(name: &str) -> Result<tch::Device> {
    let bad = || {
        Error::config(format!(
            "generation_device `{name}`: expected `cpu`, `cuda` or `cuda:N`"
        ))
    };
    match name {
        "cpu" => Ok(tch::Device::Cpu),
        "cuda" => Ok(tch::Device::Cuda(0)),
        _ => {
            let index = name.strip_prefix("cuda:").ok_or_else(bad)?;
            index.parse().map(tch::Device::Cuda).map_err(|_| bad())
        }
    }
}

/// verl's `async_training` knobs of the fully-async policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsyncConfig {
    /// After each weight sync the rollouter may start at most
    /// `(1 + staleness_threshold) · trigger_parameter_sync_step · require_batches ·
    /// tasks_per_step` new groups, then waits for the next sync.
    pub staleness_threshold: f64,
    /// Trainer steps between weight syncs.
    pub trigger_parameter_sync_step: usize,
    /// Mini-batches (of `tasks_per_step` groups, one optimizer step each) a trainer step
    /// waits for.
    pub require_batches: usize,
    /// Rollouts in flight continue across a weight sync (their later tokens carry the new
    /// version); without it a sync waits for them and holds new ones back.
    pub partial_rollout: bool,
    /// A seed fixes the run: group `g` (in the task source's order) runs wholly on the weights
    /// of sync `⌈(g + 1 − P) / S⌉` (0 below `P`; `P` groups the gate admits per period, `S`
    /// consumed per sync), the staleness the knobs allow, whatever the clock; groups reach
    /// the trainer in order, a sync waits for the groups scheduled before it, and
    /// `partial_rollout` does not apply. Checkpoints are written at syncs only. Each step's
    /// `schedule` in `metrics.jsonl` records it.
    pub deterministic: bool,
}

impl Default for AsyncConfig {
    fn default() -> Self {
        Self {
            staleness_threshold: 0.5,
            trigger_parameter_sync_step: 1,
            require_batches: 1,
            partial_rollout: true,
            deterministic: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::KlKind;

    #[test]
    fn the_generation_device_is_checked_by_name() {
        let c = PipelineConfig::from_yaml_str("generation_device: cuda:1\n").unwrap();
        c.validate().unwrap();
        for bad in ["gpu", "cuda:", "cuda:-1", "cuda:x", "CPU"] {
            let c = PipelineConfig {
                generation_device: Some(bad.into()),
                ..PipelineConfig::default()
            };
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(&format!("generation_device `{bad}`")), "{err}");
        }
    }

    #[test]
    fn every_objective_knob_is_read_by_its_verl_name() {
        let yaml = "rl:
  loss_mode: cispo
  adv_estimator: rloo
  norm_adv_by_std_in_grpo: false
  clip_ratio_low: 0.1
  clip_ratio_high: 0.3
  clip_ratio_c: 5.0
  loss_agg_mode: seq-mean-token-sum-norm
  use_kl_loss: true
  kl_loss_coef: 0.05
  kl_loss_type: mse
  entropy_coeff: 0.01
";
        let c = PipelineConfig::from_yaml_str(yaml).unwrap();
        c.validate().unwrap();
        let rl = &c.rl;
        assert_eq!(rl.adv_estimator, AdvEstimator::Rloo);
        assert!(!rl.norm_adv_by_std_in_grpo);
        let o = rl.objective();
        assert_eq!(o.loss_mode, PolicyLossMode::Cispo);
        assert_eq!(
            (
                o.clip.clip_ratio_low,
                o.clip.clip_ratio_high,
                o.clip.clip_ratio_c
            ),
            (0.1, 0.3, 5.0)
        );
        assert_eq!(o.agg, LossAggMode::SeqMeanTokenSumNorm);
        let kl = o.kl.unwrap();
        assert_eq!(
            (kl.coef, kl.estimator),
            (0.05, KlEstimator::plain(KlKind::K2))
        );
        assert_eq!(o.entropy_coeff, 0.01);
        // Written back with the same names, and read again to the same config.
        let written = serde_norway::to_string(&c).unwrap();
        assert!(
            written.contains("loss_agg_mode: seq-mean-token-sum-norm"),
            "{written}"
        );
        assert_eq!(PipelineConfig::from_yaml_str(&written).unwrap(), c);
    }

    #[test]
    fn the_defaults_are_verls_and_the_earlier_keys_still_read() {
        let default = RlConfig::default().objective();
        assert_eq!(default, RlObjective::default());
        let old =
            PipelineConfig::from_yaml_str("rl:\n  loss: grpo\n  norm_adv_by_std: false\n").unwrap();
        assert_eq!(old.rl.loss_mode, PolicyLossMode::Vanilla);
        assert!(!old.rl.norm_adv_by_std_in_grpo);
    }

    #[test]
    fn bad_objective_knobs_are_errors_naming_them() {
        for (yaml, field) in [
            ("rl:\n  clip_ratio_c: 1.0\n", "rl.clip_ratio_c"),
            ("rl:\n  clip_ratio_low: -0.1\n", "rl.clip_ratio_low"),
            ("rl:\n  kl_loss_coef: .nan\n", "rl.kl_loss_coef"),
            ("rl:\n  entropy_coeff: .inf\n", "rl.entropy_coeff"),
        ] {
            let err = PipelineConfig::from_yaml_str(yaml)
                .unwrap()
                .validate()
                .unwrap_err();
            assert!(err.to_string().contains(field), "{yaml}: {err}");
        }
        for yaml in [
            "rl:\n  adv_estimator: gae\n",
            "rl:\n  loss_agg_mode: mean\n",
            "rl:\n  kl_loss_type: k9\n",
        ] {
            let err = PipelineConfig::from_yaml_str(yaml).unwrap_err();
            let name = yaml.rsplit(": ").next().unwrap().trim();
            assert!(err.to_string().contains(name), "{yaml}: {err}");
        }
    }
}
