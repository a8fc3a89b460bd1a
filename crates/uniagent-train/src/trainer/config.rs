//! Trainer configuration.

use serde::{Deserialize, Serialize};

use super::schedule::LrSchedule;
use crate::rl::{ClipConfig, KlEstimator, LossAggMode, PolicyLossMode};

/// AdamW settings. Weight decay applies to matrices (projections, embeddings) only, never to
/// norm weights or biases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Decoupled weight decay of the decay group.
    pub weight_decay: f64,
    /// Adam β₁.
    pub beta1: f64,
    /// Adam β₂.
    pub beta2: f64,
    /// Adam ε.
    pub eps: f64,
    /// Clip the global gradient L2 norm to this value (`None`: no clipping).
    pub max_grad_norm: Option<f64>,
    /// Learning-rate schedule.
    pub schedule: LrSchedule,
}

impl Default for OptimConfig {
    /// verl's actor defaults: lr 1e-6, weight decay 0.01, betas (0.9, 0.999), grad clip 1.0.
    fn default() -> Self {
        Self {
            lr: 1e-6,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            max_grad_norm: Some(1.0),
            schedule: LrSchedule::default(),
        }
    }
}

/// A KL penalty against the frozen reference policy, added to the loss (verl's `use_kl_loss`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KlLossConfig {
    /// `kl_loss_coef`.
    pub coef: f64,
    /// `kl_loss_type` (verl's default `low_var_kl`, i.e. k3).
    pub estimator: KlEstimator,
}

/// The RL objective: a verl policy loss, optional KL and entropy terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RlObjective {
    /// Vanilla PPO, GSPO or CISPO.
    pub loss_mode: PolicyLossMode,
    /// The clip window.
    pub clip: ClipConfig,
    /// How token losses are aggregated.
    pub agg: LossAggMode,
    /// KL to the reference policy (needs a reference model).
    pub kl: Option<KlLossConfig>,
    /// Entropy bonus coefficient (`loss -= coeff · agg(entropy)`).
    pub entropy_coeff: f64,
}

impl Default for RlObjective {
    /// verl's defaults: vanilla PPO, clip 0.2/0.2/3.0, token-mean, no KL, no entropy.
    fn default() -> Self {
        Self {
            loss_mode: PolicyLossMode::Vanilla,
            clip: ClipConfig::default(),
            agg: LossAggMode::TokenMean,
            kl: None,
            entropy_coeff: 0.0,
        }
    }
}

/// Which objective a step optimises.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TrainMode {
    /// Policy-gradient step from advantages.
    Rl(RlObjective),
    /// Supervised fine-tuning: masked NLL (token-mean) of the response tokens with mask 1.
    Sft,
}

/// Where the `old_log_prob` of the policy loss comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OldLogProbSource {
    /// Recomputed under the current policy before the update (verl's default).
    Recompute,
    /// The rollout engine's logprobs stored in the trajectory (`response_logprobs`).
    Rollout,
}

/// Everything a [`Trainer`](super::Trainer) needs besides the models.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainerConfig {
    /// RL or SFT.
    pub mode: TrainMode,
    /// AdamW and schedule.
    pub optim: OptimConfig,
    /// Rows per forward/backward pass; gradients are accumulated over the mini-batch so the
    /// result does not depend on it.
    pub micro_batch_size: usize,
    /// Log-probs are computed from `logits / temperature` (verl uses the rollout temperature).
    pub temperature: f64,
    /// Source of `old_log_prob`.
    pub old_log_prob: OldLogProbSource,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        Self {
            mode: TrainMode::Rl(RlObjective::default()),
            optim: OptimConfig::default(),
            micro_batch_size: 4,
            temperature: 1.0,
            old_log_prob: OldLogProbSource::Recompute,
        }
    }
}
