//! Loss aggregation (`agg_loss`) with verl 0.9.1's semantics.

use std::fmt;
use std::str::FromStr;

use tch::{Kind, Tensor};

use super::error::{expect_2d, expect_shape, RlError, RlResult};
use super::masked::{as_bool, as_values, masked_sum};

/// How a `[B, T]` loss matrix becomes a scalar (`actor.loss_agg_mode`).
///
/// With `L` the loss matrix, `m` the mask and the [`GlobalBatchInfo`] `N_tok`, `G`, `dp`, `S`:
///
/// | mode | formula |
/// |---|---|
/// | `token-mean` | `Σ L·m / N_tok · dp` |
/// | `token-sum` | `Σ L·m · dp` |
/// | `seq-mean-token-sum` | `Σ_i [Σ_t L·m]·[Σ_t m > 0] / G · dp` |
/// | `seq-mean-token-sum-norm` | the above `/ S` |
/// | `seq-mean-token-mean` | `Σ_i [Σ_t L·m / (Σ_t m + 1e-8)]·[Σ_t m > 0] / G · dp` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossAggMode {
    /// `token-mean`.
    TokenMean,
    /// `token-sum`.
    TokenSum,
    /// `seq-mean-token-sum`.
    SeqMeanTokenSum,
    /// `seq-mean-token-sum-norm`.
    SeqMeanTokenSumNorm,
    /// `seq-mean-token-mean`.
    SeqMeanTokenMean,
}

impl LossAggMode {
    /// All five modes, in the order verl documents them.
    pub const ALL: [LossAggMode; 5] = [
        LossAggMode::TokenMean,
        LossAggMode::TokenSum,
        LossAggMode::SeqMeanTokenSum,
        LossAggMode::SeqMeanTokenSumNorm,
        LossAggMode::SeqMeanTokenMean,
    ];

    /// verl's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            LossAggMode::TokenMean => "token-mean",
            LossAggMode::TokenSum => "token-sum",
            LossAggMode::SeqMeanTokenSum => "seq-mean-token-sum",
            LossAggMode::SeqMeanTokenSumNorm => "seq-mean-token-sum-norm",
            LossAggMode::SeqMeanTokenMean => "seq-mean-token-mean",
        }
    }
}

impl fmt::Display for LossAggMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LossAggMode {
    type Err = RlError;

    fn from_str(s: &str) -> RlResult<Self> {
        LossAggMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| RlError::UnknownName {
                kind: "loss aggregation mode",
                name: s.to_owned(),
            })
    }
}

/// The normalisers verl's engine passes to `agg_loss` (`config.global_batch_info`). `None`
/// fields fall back to verl's standalone defaults: the local `Σ m` for `batch_num_tokens`, the
/// number of rows with a non-empty mask for `global_batch_size`, the padded width `T` for
/// `loss_scale_factor`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalBatchInfo {
    /// Data-parallel world size (the loss is multiplied by it; DP averaging divides it back).
    pub dp_size: i64,
    /// Σ mask over the whole mini-batch (all micro-batches, all DP ranks).
    pub batch_num_tokens: Option<i64>,
    /// Rows in the mini-batch (`ppo_mini_batch_size × n`), fully masked rows included.
    pub global_batch_size: Option<i64>,
    /// Divisor of `seq-mean-token-sum-norm`.
    pub loss_scale_factor: Option<i64>,
}

impl GlobalBatchInfo {
    /// No global information: verl's standalone `agg_loss` defaults.
    pub const LOCAL: GlobalBatchInfo = GlobalBatchInfo {
        dp_size: 1,
        batch_num_tokens: None,
        global_batch_size: None,
        loss_scale_factor: None,
    };

    /// verl's trainer semantics when `mask` (`[B, T]`) is one whole mini-batch on one rank:
    /// `batch_num_tokens = Σ m`, `global_batch_size = B`, `dp_size = 1`,
    /// `loss_scale_factor = T`. Compute it once per mini-batch and pass it to every
    /// micro-batch, so the accumulated gradient does not depend on the micro-batching.
    pub fn for_mini_batch(mask: &Tensor) -> RlResult<Self> {
        let [b, t] = expect_2d("response_mask", mask)?;
        Ok(GlobalBatchInfo {
            dp_size: 1,
            batch_num_tokens: Some(as_bool(mask).sum(Kind::Int64).int64_value(&[])),
            global_batch_size: Some(b),
            loss_scale_factor: Some(t),
        })
    }
}

impl Default for GlobalBatchInfo {
    fn default() -> Self {
        GlobalBatchInfo::LOCAL
    }
}

/// Aggregates `loss_mat` (`[B, T]`) under `loss_mask` into a scalar: verl's `agg_loss`.
///
/// ```
/// use tch::Tensor;
/// use uniagent_train::rl::{agg_loss, GlobalBatchInfo, LossAggMode};
/// let loss = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2]);
/// let mask = Tensor::from_slice(&[1i64, 1, 1, 0]).view([2, 2]);
/// let info = GlobalBatchInfo::for_mini_batch(&mask)?;
/// let l = agg_loss(&loss, &mask, LossAggMode::TokenMean, &info)?;
/// assert_eq!(l.double_value(&[]), 2.0);
/// let l = agg_loss(&loss, &mask, LossAggMode::SeqMeanTokenMean, &info)?;
/// assert!((l.double_value(&[]) - 2.25).abs() < 1e-6);
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
pub fn agg_loss(
    loss_mat: &Tensor,
    loss_mask: &Tensor,
    mode: LossAggMode,
    info: &GlobalBatchInfo,
) -> RlResult<Tensor> {
    let [b, t] = expect_2d("loss_mat", loss_mat)?;
    expect_shape("loss_mask", loss_mask, &[b, t])?;
    let kind = loss_mat.kind();
    let dp = info.dp_size as f64;
    let loss = match mode {
        LossAggMode::TokenMean => {
            let tokens = match info.batch_num_tokens {
                Some(n) => Tensor::from(n as f64).to_kind(kind),
                None => as_values(loss_mask, kind).sum(kind),
            };
            masked_sum(loss_mat, loss_mask) / tokens * dp
        }
        LossAggMode::TokenSum => masked_sum(loss_mat, loss_mask) * dp,
        LossAggMode::SeqMeanTokenSum | LossAggMode::SeqMeanTokenSumNorm => {
            let m = as_values(loss_mask, kind);
            let seq_losses = (loss_mat * &m).sum_dim_intlist(-1, false, kind);
            let seq_mask = m.sum_dim_intlist(-1, false, kind).gt(0.0).to_kind(kind);
            let loss = masked_sum(&seq_losses, &seq_mask) / seq_count(info, &seq_mask, kind) * dp;
            if mode == LossAggMode::SeqMeanTokenSumNorm {
                loss / info.loss_scale_factor.unwrap_or(t) as f64
            } else {
                loss
            }
        }
        LossAggMode::SeqMeanTokenMean => {
            let m = as_values(loss_mask, kind);
            let tokens = m.sum_dim_intlist(-1, false, kind);
            let seq_losses = (loss_mat * &m).sum_dim_intlist(-1, false, kind) / (&tokens + 1e-8);
            let seq_mask = tokens.gt(0.0).to_kind(kind);
            masked_sum(&seq_losses, &seq_mask) / seq_count(info, &seq_mask, kind) * dp
        }
    };
    Ok(loss)
}

fn seq_count(info: &GlobalBatchInfo, seq_mask: &Tensor, kind: Kind) -> Tensor {
    match info.global_batch_size {
        Some(g) => Tensor::from(g as f64).to_kind(kind),
        None => seq_mask.sum(kind),
    }
}
