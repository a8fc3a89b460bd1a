//! Rollout correction (verl 0.9.1 `trainer/ppo/rollout_corr_helper.py`): importance weights
//! and rejection masks between the policy that sampled the rollout (behaviour, the engine's
//! logprobs) and the policy the trainer recomputes (proximal, `old_log_prob`). With them the
//! policy loss is decoupled PPO: the clip is taken around the proximal policy, and the
//! importance weight `π_proximal / π_behaviour` multiplies each token's loss.
//!
//! - [`is_weights`]: truncated IS (TIS, `upper` only) or IcePop (`lower`..`upper`, zero outside),
//!   per token or per sequence (the product of token ratios).
//! - [`rejection_mask`]: divergence filters (`token_k*`, `seq_sum_k*`, `seq_mean_k*`,
//!   `seq_max_k*`); sequence-level MIS is `seq_sum_k1`, Geo-RS (geometric-mean ratio) is
//!   `seq_mean_k1`.
//!
//! Log ratios are clamped to ±20 before exponentiation, as verl does.

use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::error::{expect_2d, expect_shape};
use super::error::{RlError, RlResult};
use super::masked::{as_bool, as_values, masked_mean, masked_product};

/// verl's `SAFETY_BOUND`.
const SAFETY_BOUND: f64 = 20.0;

/// Where importance weights are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsLevel {
    /// One weight per token (biased, low variance).
    Token,
    /// One weight per sequence, the product of its token ratios.
    Sequence,
}

/// Importance-weight settings (verl's `rollout_is`, `rollout_is_threshold`,
/// `rollout_is_batch_normalize`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IsConfig {
    /// Token or sequence weights.
    pub level: IsLevel,
    /// Weights above are truncated to it (TIS), or zeroed with `lower` set (IcePop).
    pub upper: f64,
    /// IcePop's lower bound: weights below it (or above `upper`) become 0.
    #[serde(default)]
    pub lower: Option<f64>,
    /// Divide the weights by their batch mean.
    #[serde(default)]
    pub batch_normalize: bool,
}

/// One rejection criterion (verl's `rollout_rs` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RsStatistic {
    /// `−log r` per token, kept within `[log lower, log upper]`.
    TokenK1,
    /// `½ (log r)²` per token ≤ upper.
    TokenK2,
    /// `r − 1 − log r` per token ≤ upper.
    TokenK3,
    /// Σ of token k1 per sequence within `[log lower, log upper]` (sequence MIS).
    SeqSumK1,
    /// Σ of token k2 per sequence ≤ upper.
    SeqSumK2,
    /// Σ of token k3 per sequence ≤ upper.
    SeqSumK3,
    /// Mean of token k1 per sequence within `[log lower, log upper]` (Geo-RS).
    SeqMeanK1,
    /// Mean of token k2 per sequence ≤ upper.
    SeqMeanK2,
    /// Mean of token k3 per sequence ≤ upper.
    SeqMeanK3,
    /// Max of token k2 per sequence ≤ upper.
    SeqMaxK2,
    /// Max of token k3 per sequence ≤ upper.
    SeqMaxK3,
}

impl RsStatistic {
    fn is_k1(self) -> bool {
        matches!(self, Self::TokenK1 | Self::SeqSumK1 | Self::SeqMeanK1)
    }
}

/// A rejection criterion and its thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RsCriterion {
    /// The statistic.
    pub statistic: RsStatistic,
    /// Upper bound (a ratio for k1 statistics, a divergence otherwise).
    pub upper: f64,
    /// Lower ratio bound of k1 statistics (default `1 / upper`); ignored otherwise.
    #[serde(default)]
    pub lower: Option<f64>,
}

/// The whole rollout correction of a step: weights and/or rejection (verl's
/// `RolloutCorrectionConfig`, decoupled mode).
///
/// ```
/// use uniagent_train::rl::RolloutCorrection;
/// let tis = RolloutCorrection::token_tis(2.0);
/// assert!(tis.is.is_some() && tis.rs.is_empty());
/// let geo: RolloutCorrection = serde_json::from_str(
///     r#"{"rs": [{"statistic": "seq_mean_k1", "upper": 1.001, "lower": 0.999}]}"#).unwrap();
/// assert_eq!(geo, RolloutCorrection::geo_rs(0.999, 1.001));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutCorrection {
    /// Importance weights, if any.
    pub is: Option<IsConfig>,
    /// Rejection criteria (all must pass).
    pub rs: Vec<RsCriterion>,
}

impl RolloutCorrection {
    /// Token-level truncated IS (verl's `decoupled_token_is`).
    pub fn token_tis(upper: f64) -> Self {
        Self {
            is: Some(IsConfig {
                level: IsLevel::Token,
                upper,
                lower: None,
                batch_normalize: false,
            }),
            rs: Vec::new(),
        }
    }

    /// Sequence-level truncated IS (verl's `decoupled_seq_is`).
    pub fn seq_tis(upper: f64) -> Self {
        Self {
            is: Some(IsConfig {
                level: IsLevel::Sequence,
                upper,
                lower: None,
                batch_normalize: false,
            }),
            rs: Vec::new(),
        }
    }

    /// Sequence-level masked IS: sequence TIS plus rejection of sequences whose ratio leaves
    /// `[rs_lower, rs_upper]` (verl's `decoupled_seq_is_rs`).
    pub fn seq_mis(is_upper: f64, rs_lower: f64, rs_upper: f64) -> Self {
        Self {
            rs: vec![RsCriterion {
                statistic: RsStatistic::SeqSumK1,
                upper: rs_upper,
                lower: Some(rs_lower),
            }],
            ..Self::seq_tis(is_upper)
        }
    }

    /// Geometric-mean rejection (verl's `decoupled_geo_rs`).
    pub fn geo_rs(lower: f64, upper: f64) -> Self {
        Self {
            is: None,
            rs: vec![RsCriterion {
                statistic: RsStatistic::SeqMeanK1,
                upper,
                lower: Some(lower),
            }],
        }
    }

    /// Nothing to do.
    pub fn is_disabled(&self) -> bool {
        self.is.is_none() && self.rs.is_empty()
    }
}

/// What a correction did to a batch.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CorrectionMetrics {
    /// verl's `rollout_is_mean`: masked mean of the applied weights.
    pub is_mean: f64,
    /// Largest applied weight (token level) or raw sequence ratio (sequence level).
    pub is_max: f64,
    /// Share of ratios above the upper threshold (`rollout_is_ratio_fraction_high`).
    pub is_fraction_high: f64,
    /// Share of ratios below the lower threshold (`rollout_is_ratio_fraction_low`).
    pub is_fraction_low: f64,
    /// Share of mask-1 tokens rejected (`rollout_rs_masked_fraction`).
    pub rs_masked_fraction: f64,
    /// Share of sequences with a rejected token (`rollout_rs_seq_masked_fraction`).
    pub rs_seq_masked_fraction: f64,
}

/// `masked_sum(x, m, axis=-1)` as verl computes it.
fn row_sum(values: &Tensor, mask: &Tensor) -> Tensor {
    masked_product(values, mask).sum_dim_intlist([-1i64].as_slice(), false, values.kind())
}

/// `masked_mean(x, m, axis=-1)` as verl computes it.
fn row_mean(values: &Tensor, mask: &Tensor) -> Tensor {
    let count =
        as_values(mask, values.kind()).sum_dim_intlist([-1i64].as_slice(), false, values.kind());
    row_sum(values, mask) / (count + 1e-8)
}

fn check(log_ratio: &Tensor, mask: &Tensor) -> RlResult<()> {
    let [b, t] = expect_2d("log_ratio", log_ratio)?;
    expect_shape("response_mask", mask, &[b, t])
}

fn positive(what: &str, v: f64) -> RlResult<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(RlError::InvalidConfig(format!(
            "{what} must be a positive number, got {v}"
        )))
    }
}

/// Importance weights `π_proximal / π_behaviour` from `log_ratio = old_log_prob −
/// rollout_log_prob` (`compute_rollout_correction_weights`): detached, 0 on mask-0 tokens.
pub fn is_weights(
    log_ratio: &Tensor,
    mask: &Tensor,
    c: &IsConfig,
) -> RlResult<(Tensor, CorrectionMetrics)> {
    check(log_ratio, mask)?;
    positive("rollout_is upper threshold", c.upper)?;
    if let Some(lower) = c.lower {
        positive("rollout_is lower threshold", lower)?;
        if lower > c.upper {
            return Err(RlError::InvalidConfig(
                "rollout_is lower threshold above the upper".into(),
            ));
        }
    }
    let kind = log_ratio.kind();
    let m = as_values(mask, kind);
    let log_ratio = log_ratio.detach();
    let (raw, log_for_metrics) = match c.level {
        IsLevel::Token => (
            log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp(),
            log_ratio.shallow_clone(),
        ),
        IsLevel::Sequence => {
            let s = row_sum(&log_ratio, mask).unsqueeze(-1);
            (
                s.clamp(-SAFETY_BOUND, SAFETY_BOUND)
                    .exp()
                    .expand_as(&log_ratio),
                s,
            )
        }
    };
    let raw = raw * &m;
    let mut w = match c.lower {
        None => raw.clamp_max(c.upper),
        Some(lower) => {
            let keep = raw.ge(lower).logical_and(&raw.le(c.upper));
            raw.where_self(&keep, &raw.zeros_like())
        }
    };
    let lower = c.lower.unwrap_or(1.0 / c.upper);
    let mut metrics = CorrectionMetrics {
        is_mean: masked_mean(&w, mask).double_value(&[]),
        ..CorrectionMetrics::default()
    };
    match c.level {
        IsLevel::Token => {
            metrics.is_fraction_high =
                masked_mean(&raw.gt(c.upper).to_kind(kind), mask).double_value(&[]);
            metrics.is_fraction_low =
                masked_mean(&raw.lt(lower).to_kind(kind), mask).double_value(&[]);
            let filled = w.masked_fill(&as_bool(mask).logical_not(), f64::NEG_INFINITY);
            metrics.is_max = filled.max().double_value(&[]);
        }
        IsLevel::Sequence => {
            metrics.is_max = log_for_metrics
                .max()
                .clamp_max(SAFETY_BOUND)
                .exp()
                .double_value(&[]);
            metrics.is_fraction_high = log_for_metrics
                .gt(c.upper.ln())
                .to_kind(kind)
                .mean(kind)
                .double_value(&[]);
            metrics.is_fraction_low = log_for_metrics
                .lt(lower.ln())
                .to_kind(kind)
                .mean(kind)
                .double_value(&[]);
        }
    }
    if c.batch_normalize {
        let mean = match c.level {
            IsLevel::Token => masked_mean(&w, mask),
            IsLevel::Sequence => {
                let seq = row_mean(&w, mask);
                let seq_mask = as_values(mask, kind)
                    .sum_dim_intlist([-1i64].as_slice(), false, kind)
                    .gt(0.0)
                    .to_kind(kind);
                (seq * &seq_mask).sum(kind) / seq_mask.sum(kind).clamp_min(1e-8)
            }
        };
        if mean.double_value(&[]) > 1e-8 {
            w /= mean;
        }
    }
    Ok((w, metrics))
}

/// The response mask with the tokens (or whole sequences) that fail any criterion set to 0
/// (`compute_rollout_rejection_mask`), and the rejected fractions.
pub fn rejection_mask(
    log_ratio: &Tensor,
    mask: &Tensor,
    criteria: &[RsCriterion],
) -> RlResult<(Tensor, CorrectionMetrics)> {
    check(log_ratio, mask)?;
    let kind = log_ratio.kind();
    let m = as_values(mask, kind);
    let mb = as_bool(mask);
    let lr = log_ratio.detach().clamp(-SAFETY_BOUND, SAFETY_BOUND);
    let k1 = lr.neg();
    let k2 = lr.square() * 0.5;
    let k3 = lr.exp() - 1.0 - &lr;
    let mut combined = m.ones_like();
    for c in criteria {
        positive("rollout_rs upper threshold", c.upper)?;
        let (lo, hi) = if c.statistic.is_k1() {
            let lower = c.lower.unwrap_or(1.0 / c.upper);
            positive("rollout_rs lower threshold", lower)?;
            if lower > c.upper {
                return Err(RlError::InvalidConfig(
                    "rollout_rs lower threshold above the upper".into(),
                ));
            }
            (Some(lower.ln()), c.upper.ln())
        } else {
            (None, c.upper)
        };
        let within = |stat: &Tensor| match lo {
            Some(lo) => stat.ge(lo).logical_and(&stat.le(hi)),
            None => stat.le(hi),
        };
        let seq_max = |values: &Tensor| {
            let filled = values.masked_fill(&mb.logical_not(), f64::NEG_INFINITY);
            let max = filled.amax([-1i64].as_slice(), false);
            max.where_self(&max.ne(f64::NEG_INFINITY), &max.zeros_like())
        };
        use RsStatistic as S;
        let keep = match c.statistic {
            S::TokenK1 => within(&k1),
            S::TokenK2 => within(&k2),
            S::TokenK3 => within(&k3),
            seq => {
                let stat = match seq {
                    S::SeqSumK1 => row_sum(&k1, mask),
                    S::SeqSumK2 => row_sum(&k2, mask),
                    S::SeqSumK3 => row_sum(&k3, mask),
                    S::SeqMeanK1 => row_mean(&k1, mask),
                    S::SeqMeanK2 => row_mean(&k2, mask),
                    S::SeqMeanK3 => row_mean(&k3, mask),
                    S::SeqMaxK2 => seq_max(&k2),
                    _ => seq_max(&k3),
                };
                within(&stat).unsqueeze(-1).expand_as(&mb)
            }
        };
        combined *= keep.to_kind(kind);
    }
    let rejected = masked_mean(&(combined.ones_like() - &combined), mask).double_value(&[]);
    let final_keep = combined.gt(0.5).logical_and(&mb);
    let seq_rejected = final_keep
        .logical_not()
        .logical_and(&mb)
        .any_dim(-1, false)
        .to_kind(kind)
        .mean(kind)
        .double_value(&[]);
    let metrics = CorrectionMetrics {
        rs_masked_fraction: rejected,
        rs_seq_masked_fraction: seq_rejected,
        ..CorrectionMetrics::default()
    };
    Ok(((m * combined).to_kind(mask.kind()), metrics))
}

/// Applies `c` (`compute_rollout_correction_and_rejection_mask`): returns the IS weights (if
/// configured), the response mask after rejection, and the metrics of both.
pub fn rollout_correction(
    old_log_prob: &Tensor,
    rollout_log_prob: &Tensor,
    mask: &Tensor,
    c: &RolloutCorrection,
) -> RlResult<(Option<Tensor>, Tensor, CorrectionMetrics)> {
    let [b, t] = expect_2d("old_log_prob", old_log_prob)?;
    expect_shape("rollout_log_prob", rollout_log_prob, &[b, t])?;
    expect_shape("response_mask", mask, &[b, t])?;
    let log_ratio = (old_log_prob - rollout_log_prob).detach();
    let mut metrics = CorrectionMetrics::default();
    let weights = match &c.is {
        Some(is) => {
            let (w, m) = is_weights(&log_ratio, mask, is)?;
            metrics = m;
            Some(w)
        }
        None => None,
    };
    let mask = if c.rs.is_empty() {
        mask.shallow_clone()
    } else {
        let (new_mask, m) = rejection_mask(&log_ratio, mask, &c.rs)?;
        metrics.rs_masked_fraction = m.rs_masked_fraction;
        metrics.rs_seq_masked_fraction = m.rs_seq_masked_fraction;
        new_mask
    };
    Ok((weights, mask, metrics))
}
