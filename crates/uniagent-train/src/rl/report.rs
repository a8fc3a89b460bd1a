//! The `rl_numerics` batch format (`docs/cli.md`, section `rl_numerics`): one JSON batch in,
//! every advantage, policy loss (value and gradient) and KL estimate out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::advantages::{
    group_advantages, grpo_advantages, token_level_rewards, GroupEstimator, GRPO_EPSILON,
};
use super::aggregation::{GlobalBatchInfo, LossAggMode};
use super::error::{RlError, RlResult};
use super::groups::Groups;
use super::kl::{kl_penalty, KlEstimator, KlKind};
use super::policy_loss::{policy_loss, ClipConfig, LossInputs, PolicyLossMode};

/// The clip window of an [`RlBatch`]; one window for all three loss modes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlBatchConfig {
    /// `1 − clip_ratio_low` is the lower clip bound.
    pub clip_ratio_low: f64,
    /// `1 + clip_ratio_high` is the upper clip bound.
    pub clip_ratio_high: f64,
    /// The dual-clip bound (vanilla PPO only), > 1.
    pub clip_ratio_c: f64,
}

/// The input of `rl_numerics`: `B` rows of width `T`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlBatch {
    /// Group id of each row (rows of one prompt share it).
    pub uid: Vec<String>,
    /// Outcome score of each row.
    pub scores: Vec<f64>,
    /// 1 on tokens sampled by the policy, 0 elsewhere.
    pub response_mask: Vec<Vec<u8>>,
    /// Log-probs under the policy that sampled (π_old).
    pub old_log_prob: Vec<Vec<f64>>,
    /// Log-probs under the current policy (the gradient is taken w.r.t. these).
    pub log_prob: Vec<Vec<f64>>,
    /// Log-probs under the reference policy.
    pub ref_log_prob: Vec<Vec<f64>>,
    /// The clip window.
    pub config: RlBatchConfig,
}

/// A policy loss value and its gradient w.r.t. `log_prob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossReport {
    /// The aggregated loss.
    pub loss: f32,
    /// `∂loss/∂log_prob`, `[B][T]`.
    pub grad_log_prob: Vec<Vec<f32>>,
}

/// The output of `rl_numerics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlReport {
    /// `grpo`, `grpo_no_std`, `rloo`, `reinforce_plus_plus_baseline`, each `[B][T]`.
    pub advantages: BTreeMap<String, Vec<Vec<f32>>>,
    /// `policy_loss[mode][aggregation]` with the `grpo` advantages, modes `vanilla`, `gspo`,
    /// `cispo`, the five aggregation modes under [`GlobalBatchInfo::for_mini_batch`].
    pub policy_loss: BTreeMap<String, BTreeMap<String, LossReport>>,
    /// Per-token `k1`, `abs`, `k2`, `k3` of (`log_prob`, `ref_log_prob`), unmasked.
    pub kl: BTreeMap<String, Vec<Vec<f32>>>,
}

impl RlBatch {
    /// Checks the shapes and values and returns `(B, T)`.
    pub fn validate(&self) -> RlResult<(usize, usize)> {
        let b = self.uid.len();
        if b == 0 {
            return Err(RlError::InvalidBatch("no rows".into()));
        }
        if self.scores.len() != b {
            return Err(RlError::InvalidBatch(format!(
                "{} scores for {b} uids",
                self.scores.len()
            )));
        }
        let t = self.response_mask.first().map_or(0, Vec::len);
        if t == 0 {
            return Err(RlError::InvalidBatch("responses of width 0".into()));
        }
        let widths_ok = |name: &str, rows: &[Vec<f64>]| -> RlResult<()> {
            if rows.len() != b || rows.iter().any(|r| r.len() != t) {
                return Err(RlError::InvalidBatch(format!(
                    "{name} must be {b} rows of {t}"
                )));
            }
            if rows.iter().flatten().any(|x| !x.is_finite()) {
                return Err(RlError::InvalidBatch(format!(
                    "{name} has a non-finite value"
                )));
            }
            Ok(())
        };
        if self.response_mask.len() != b || self.response_mask.iter().any(|r| r.len() != t) {
            return Err(RlError::InvalidBatch(format!(
                "response_mask must be {b} rows of {t}"
            )));
        }
        if self.response_mask.iter().flatten().any(|m| *m > 1) {
            return Err(RlError::InvalidBatch(
                "response_mask values must be 0 or 1".into(),
            ));
        }
        if self.scores.iter().any(|s| !s.is_finite()) {
            return Err(RlError::InvalidBatch(
                "scores has a non-finite value".into(),
            ));
        }
        widths_ok("old_log_prob", &self.old_log_prob)?;
        widths_ok("log_prob", &self.log_prob)?;
        widths_ok("ref_log_prob", &self.ref_log_prob)?;
        Ok((b, t))
    }
}

fn matrix(rows: &[Vec<f64>], b: usize, t: usize) -> Tensor {
    let flat: Vec<f32> = rows.iter().flatten().map(|x| *x as f32).collect();
    Tensor::from_slice(&flat).view([b as i64, t as i64])
}

fn to_rows(t: &Tensor) -> RlResult<Vec<Vec<f32>>> {
    let t = t
        .detach()
        .to_kind(Kind::Float)
        .to_device(Device::Cpu)
        .contiguous();
    Ok(Vec::<Vec<f32>>::try_from(&t)?)
}

/// Computes the whole report for `batch` in float32 on the CPU.
pub fn rl_report(batch: &RlBatch) -> RlResult<RlReport> {
    let (b, t) = batch.validate()?;
    let mask_flat: Vec<i64> = batch
        .response_mask
        .iter()
        .flatten()
        .map(|m| i64::from(*m))
        .collect();
    let mask = Tensor::from_slice(&mask_flat).view([b as i64, t as i64]);
    let scores: Vec<f32> = batch.scores.iter().map(|s| *s as f32).collect();
    let rewards = token_level_rewards(&Tensor::from_slice(&scores), &mask)?;
    let groups = Groups::from_uids(&batch.uid);
    let old = matrix(&batch.old_log_prob, b, t);
    let current = matrix(&batch.log_prob, b, t);
    let reference = matrix(&batch.ref_log_prob, b, t);

    let grpo = grpo_advantages(&rewards, &mask, &groups, true, GRPO_EPSILON)?;
    let mut advantages = BTreeMap::new();
    advantages.insert("grpo".to_owned(), to_rows(&grpo)?);
    let no_std = grpo_advantages(&rewards, &mask, &groups, false, GRPO_EPSILON)?;
    advantages.insert("grpo_no_std".to_owned(), to_rows(&no_std)?);
    advantages.insert(
        "rloo".to_owned(),
        to_rows(&group_advantages(
            GroupEstimator::Rloo,
            &rewards,
            &mask,
            &groups,
        )?)?,
    );
    let rfpp = group_advantages(
        GroupEstimator::ReinforcePlusPlusBaseline,
        &rewards,
        &mask,
        &groups,
    )?;
    advantages.insert("reinforce_plus_plus_baseline".to_owned(), to_rows(&rfpp)?);

    let clip = ClipConfig {
        clip_ratio_low: batch.config.clip_ratio_low,
        clip_ratio_high: batch.config.clip_ratio_high,
        clip_ratio_c: batch.config.clip_ratio_c,
    };
    let info = GlobalBatchInfo::for_mini_batch(&mask)?;
    let mut losses = BTreeMap::new();
    for mode in PolicyLossMode::ALL {
        let mut per_agg = BTreeMap::new();
        for agg in LossAggMode::ALL {
            let logp = current.detach().set_requires_grad(true);
            let out = policy_loss(
                mode,
                LossInputs::new(&old, &logp, &grpo, &mask),
                &clip,
                agg,
                &info,
            )?;
            out.loss.f_backward()?;
            let grad = logp.grad();
            let grad = if grad.defined() {
                grad
            } else {
                logp.zeros_like()
            };
            per_agg.insert(
                agg.as_str().to_owned(),
                LossReport {
                    loss: out.loss.double_value(&[]) as f32,
                    grad_log_prob: to_rows(&grad)?,
                },
            );
        }
        losses.insert(mode.as_str().to_owned(), per_agg);
    }

    let mut kl = BTreeMap::new();
    for (name, kind) in [
        ("k1", KlKind::K1),
        ("abs", KlKind::Abs),
        ("k2", KlKind::K2),
        ("k3", KlKind::K3),
    ] {
        let value = kl_penalty(&current, &reference, KlEstimator::plain(kind))?;
        kl.insert(name.to_owned(), to_rows(&value)?);
    }
    Ok(RlReport {
        advantages,
        policy_loss: losses,
        kl,
    })
}
