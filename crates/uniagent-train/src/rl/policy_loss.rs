//! Policy losses with verl 0.9.1's semantics (`get_policy_loss_fn(loss_mode)`).
//!
//! All take [`LossInputs`] (`old_log_prob`, `log_prob` — the tensor gradients flow to —,
//! `advantages` and the response mask, all `[B, T]`, and optional rollout-correction weights)
//! and return the aggregated loss plus verl's metrics.
//! `Δ = log_prob − old_log_prob`, `sg` = stop-gradient.

use std::fmt;
use std::str::FromStr;

use tch::{Kind, Tensor};

use super::aggregation::{agg_loss, GlobalBatchInfo, LossAggMode};
use super::error::{expect_2d, expect_shape, RlError, RlResult};
use super::masked::{as_bool, as_values, masked_mean};

/// The policy-loss family (`actor.policy_loss.loss_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyLossMode {
    /// Dual-clip PPO (`compute_policy_loss_vanilla`):
    ///
    /// ```text
    /// Δc = clamp(Δ, −20, 20);  r = exp(Δc)
    /// L1 = −A·r;  L2 = −A·clamp(r, 1 − low, 1 + high);  Lc = max(L1, L2)
    /// L3 = −A·clip_ratio_c
    /// pg = where(A < 0, min(L3, Lc), Lc);  loss = agg_loss(pg, m)
    /// ```
    Vanilla,
    /// GSPO (`compute_policy_loss_gspo`): a sequence-level ratio with a token-level gradient path.
    ///
    /// ```text
    /// L_i = max(Σ_t m, 1);  s_i = Σ_t Δ·m / L_i             (Δ not clamped)
    /// log r = clamp(logp − sg(logp) + sg(s_i), max = 10);  r = exp(log r)
    /// pg = max(−A·r, −A·clamp(r, 1 − low, 1 + high));  loss = agg_loss(pg, m)   (no dual clip)
    /// ```
    ///
    /// Every token of row i has the value `exp(min(s_i, 10))` and `∂r/∂logp = r`. `clip_ratio_c`
    /// is ignored. verl 0.9.1 honours the configured aggregation (the GSPO recipes use
    /// `seq-mean-token-mean`).
    Gspo,
    /// CISPO (`compute_policy_loss_cispo`): the clipped ratio is a detached weight on the
    /// REINFORCE term.
    ///
    /// ```text
    /// r = exp(clamp(Δ, −20, 20));  pg = −sg(clamp(r, 1 − low, 1 + high))·A·logp;  loss = agg_loss(pg, m)
    /// ```
    Cispo,
}

impl PolicyLossMode {
    /// The three modes.
    pub const ALL: [PolicyLossMode; 3] = [
        PolicyLossMode::Vanilla,
        PolicyLossMode::Gspo,
        PolicyLossMode::Cispo,
    ];

    /// verl's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyLossMode::Vanilla => "vanilla",
            PolicyLossMode::Gspo => "gspo",
            PolicyLossMode::Cispo => "cispo",
        }
    }
}

impl fmt::Display for PolicyLossMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PolicyLossMode {
    type Err = RlError;

    /// verl's names; `grpo` (this project's earlier config name for GRPO's loss) reads as
    /// `vanilla`.
    fn from_str(s: &str) -> RlResult<Self> {
        if s == "grpo" {
            return Ok(PolicyLossMode::Vanilla);
        }
        PolicyLossMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| RlError::UnknownName {
                kind: "policy loss mode",
                name: s.to_owned(),
            })
    }
}

/// The clip window. verl's `ActorConfig` defaults: `0.2`, `0.2`, `3.0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipConfig {
    /// Ratios below `1 − clip_ratio_low` are clipped.
    pub clip_ratio_low: f64,
    /// Ratios above `1 + clip_ratio_high` are clipped.
    pub clip_ratio_high: f64,
    /// Dual-clip bound for negative advantages (vanilla only); must be > 1.
    pub clip_ratio_c: f64,
}

impl Default for ClipConfig {
    fn default() -> Self {
        ClipConfig {
            clip_ratio_low: 0.2,
            clip_ratio_high: 0.2,
            clip_ratio_c: 3.0,
        }
    }
}

/// A policy loss and its metrics (`actor/pg_clipfrac`, `actor/ppo_kl`,
/// `actor/pg_clipfrac_lower`).
#[derive(Debug)]
pub struct PolicyLoss {
    /// The aggregated loss (a scalar with the graph to `log_prob`).
    pub loss: Tensor,
    /// Fraction of mask-1 tokens whose loss was clipped.
    pub pg_clipfrac: f64,
    /// `masked_mean(−Δ, m)` (with Δ clamped to ±20 where the loss clamps it).
    pub ppo_kl: f64,
    /// Fraction of mask-1 tokens hitting the dual clip (vanilla only; 0 otherwise).
    pub pg_clipfrac_lower: f64,
}

/// What a policy loss reads: four `[B, T]` tensors and, for rollout correction, verl's
/// `rollout_is_weights` (each token's loss is multiplied by its detached weight before the
/// aggregation).
#[derive(Debug, Clone, Copy)]
pub struct LossInputs<'a> {
    /// Log-probabilities under the policy that sampled the tokens.
    pub old_log_prob: &'a Tensor,
    /// Log-probabilities under the current policy (the tensor gradients flow to).
    pub log_prob: &'a Tensor,
    /// Per-token advantages.
    pub advantages: &'a Tensor,
    /// 1 on the tokens the policy sampled.
    pub response_mask: &'a Tensor,
    /// Rollout-correction weights, `[B, T]`; `None` weighs every token 1.
    pub weights: Option<&'a Tensor>,
}

impl<'a> LossInputs<'a> {
    /// The four tensors, without weights.
    pub fn new(
        old_log_prob: &'a Tensor,
        log_prob: &'a Tensor,
        advantages: &'a Tensor,
        response_mask: &'a Tensor,
    ) -> Self {
        LossInputs {
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            weights: None,
        }
    }

    /// The same inputs with rollout-correction weights (or none).
    pub fn weighted(self, weights: Option<&'a Tensor>) -> Self {
        LossInputs { weights, ..self }
    }

    /// Checks the shapes and the clip window.
    fn validate(&self, clip: &ClipConfig) -> RlResult<()> {
        let [b, t] = expect_2d("log_prob", self.log_prob)?;
        expect_shape("old_log_prob", self.old_log_prob, &[b, t])?;
        expect_shape("advantages", self.advantages, &[b, t])?;
        expect_shape("response_mask", self.response_mask, &[b, t])?;
        check_window(clip)
    }

    /// `pg · w` when weights are given (verl: `pg_losses * rollout_is_weights`).
    fn apply_weights(&self, pg: Tensor) -> Tensor {
        match self.weights {
            Some(w) => pg * w.detach(),
            None => pg,
        }
    }
}

/// A mode's per-token loss and the tensors its metrics are read from.
struct PgTerms {
    /// Per-token policy-gradient loss, `[B, T]`, before the weights and the aggregation.
    pg: Tensor,
    /// Per-token "was clipped" indicator (in the dtype of `log_prob`).
    clipped: Tensor,
    /// `−Δ` per token (clamped where the mode clamps it).
    neg_delta: Tensor,
    /// Per-token dual-clip indicator (vanilla only).
    lower: Option<Tensor>,
}

fn check_window(clip: &ClipConfig) -> RlResult<()> {
    if !(clip.clip_ratio_low.is_finite() && clip.clip_ratio_high.is_finite()) {
        return Err(RlError::InvalidConfig(format!(
            "clip window must be finite: {clip:?}"
        )));
    }
    Ok(())
}

/// Computes the policy loss of `mode` (each mode's formula is on its [`PolicyLossMode`]
/// variant).
///
/// ```
/// use tch::Tensor;
/// use uniagent_train::rl::{
///     policy_loss, ClipConfig, GlobalBatchInfo, LossAggMode, LossInputs, PolicyLossMode,
/// };
/// let old = Tensor::from_slice(&[-1.0f32, -1.0]).view([1, 2]);
/// let logp = Tensor::from_slice(&[-0.5f32, -1.0]).view([1, 2]).set_requires_grad(true);
/// let adv = Tensor::from_slice(&[1.0f32, 1.0]).view([1, 2]);
/// let mask = Tensor::from_slice(&[1i64, 1]).view([1, 2]);
/// let info = GlobalBatchInfo::for_mini_batch(&mask)?;
/// let inputs = LossInputs::new(&old, &logp, &adv, &mask);
/// let clip = ClipConfig::default();
/// let out = policy_loss(PolicyLossMode::Vanilla, inputs, &clip, LossAggMode::TokenMean, &info)?;
/// // token 0: ratio e^0.5 clipped to 1.2, token 1: ratio 1
/// assert!((out.loss.double_value(&[]) + 1.1).abs() < 1e-6);
/// assert_eq!(out.pg_clipfrac, 0.5);
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
pub fn policy_loss(
    mode: PolicyLossMode,
    inputs: LossInputs<'_>,
    clip: &ClipConfig,
    agg: LossAggMode,
    info: &GlobalBatchInfo,
) -> RlResult<PolicyLoss> {
    inputs.validate(clip)?;
    let kind = inputs.log_prob.kind();
    let terms = match mode {
        PolicyLossMode::Vanilla => vanilla_terms(&inputs, clip, kind)?,
        PolicyLossMode::Gspo => gspo_terms(&inputs, clip, kind),
        PolicyLossMode::Cispo => cispo_terms(&inputs, clip),
    };
    let mask = as_bool(inputs.response_mask);
    let pg = inputs.apply_weights(terms.pg);
    let loss = agg_loss(&pg, &mask, agg, info)?;
    let mean = |t: &Tensor| masked_mean(t, &mask).double_value(&[]);
    Ok(PolicyLoss {
        loss,
        pg_clipfrac: mean(&terms.clipped.to_kind(kind)),
        ppo_kl: mean(&terms.neg_delta),
        pg_clipfrac_lower: terms.lower.as_ref().map_or(0.0, mean),
    })
}

/// The terms of [`PolicyLossMode::Vanilla`].
fn vanilla_terms(inputs: &LossInputs<'_>, clip: &ClipConfig, kind: Kind) -> RlResult<PgTerms> {
    if clip.clip_ratio_c.is_nan() || clip.clip_ratio_c <= 1.0 {
        return Err(RlError::InvalidConfig(format!(
            "clip_ratio_c must be > 1 for dual-clip PPO, got {}",
            clip.clip_ratio_c
        )));
    }
    let advantages = inputs.advantages;
    let delta = (inputs.log_prob - inputs.old_log_prob).clamp(-20.0, 20.0);
    let ratio = delta.exp();
    let neg_adv = advantages.neg();
    let pg1 = &neg_adv * &ratio;
    let pg2 = &neg_adv * ratio.clamp(1.0 - clip.clip_ratio_low, 1.0 + clip.clip_ratio_high);
    let clipped1 = pg1.maximum(&pg2);
    let pg3 = &neg_adv * clip.clip_ratio_c;
    let clipped2 = pg3.minimum(&clipped1);
    let negative = advantages.lt(0.0);
    let lower = clipped1.gt_tensor(&pg3).to_kind(kind) * negative.to_kind(kind);
    Ok(PgTerms {
        pg: clipped2.where_self(&negative, &clipped1),
        clipped: pg2.gt_tensor(&pg1),
        neg_delta: delta.neg(),
        lower: Some(lower),
    })
}

/// The terms of [`PolicyLossMode::Gspo`].
fn gspo_terms(inputs: &LossInputs<'_>, clip: &ClipConfig, kind: Kind) -> PgTerms {
    let log_prob = inputs.log_prob;
    let mask = as_bool(inputs.response_mask);
    let delta = log_prob - inputs.old_log_prob;
    let lengths = mask.sum_dim_intlist(-1, false, Kind::Int64).clamp_min(1);
    let seq_delta = (&delta * as_values(&mask, kind)).sum_dim_intlist(-1, false, kind) / lengths;
    let log_ratio = log_prob - log_prob.detach() + seq_delta.detach().unsqueeze(-1);
    let ratio = log_ratio.clamp_max(10.0).exp();
    let neg_adv = inputs.advantages.neg();
    let pg1 = &neg_adv * &ratio;
    let pg2 = &neg_adv * ratio.clamp(1.0 - clip.clip_ratio_low, 1.0 + clip.clip_ratio_high);
    PgTerms {
        pg: pg1.maximum(&pg2),
        clipped: pg2.gt_tensor(&pg1),
        neg_delta: delta.neg(),
        lower: None,
    }
}

/// The terms of [`PolicyLossMode::Cispo`].
fn cispo_terms(inputs: &LossInputs<'_>, clip: &ClipConfig) -> PgTerms {
    let delta = (inputs.log_prob - inputs.old_log_prob).clamp(-20.0, 20.0);
    let ratio = delta.exp();
    let clipped = ratio.clamp(1.0 - clip.clip_ratio_low, 1.0 + clip.clip_ratio_high);
    PgTerms {
        pg: clipped.detach().neg() * inputs.advantages * inputs.log_prob,
        clipped: ratio.ne_tensor(&clipped),
        neg_delta: delta.neg(),
        lower: None,
    }
}
