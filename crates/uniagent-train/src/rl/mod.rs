//! RL numerics with the exact semantics of verl 0.9.1: advantage estimators, policy losses,
//! loss aggregation, KL estimators and entropy, as pure tensor functions (`tch`).
//!
//! Every function documents its formula; the parity tests (`tests/verl_numerics.rs`) compare
//! values and gradients w.r.t. `log_prob` against verl's own functions within 1e-5.
//!
//! Conventions: `[B, T]` tensors (rows = trajectories, columns = response tokens), a response
//! mask that is boolean or 0/1 numeric, float32 or float64 values (the kind of the inputs is
//! kept). For a whole mini-batch on one rank, verl's trainer normalisers are
//! [`GlobalBatchInfo::for_mini_batch`]: `batch_num_tokens = Σ m`, `global_batch_size = B`,
//! `dp_size = 1`, `loss_scale_factor = T`.
//!
//! ```
//! use tch::Tensor;
//! use uniagent_train::rl::*;
//! let scores = Tensor::from_slice(&[1.0f32, 0.0, 1.0, 1.0]);
//! let mask = Tensor::from_slice(&[1i64, 1, 1, 0, 1, 1, 1, 1]).view([4, 2]);
//! let groups = Groups::from_uids(&["a", "a", "b", "b"]);
//! let rewards = token_level_rewards(&scores, &mask)?;
//! let adv = grpo_advantages(&rewards, &mask, &groups, true, GRPO_EPSILON)?;
//! assert_eq!(adv.double_value(&[2, 0]), 0.0); // group "b" has identical scores
//! let logp = Tensor::full([4, 2], -1.0f64, (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
//! let info = GlobalBatchInfo::for_mini_batch(&mask)?;
//! let old = logp.detach();
//! let inputs = LossInputs::new(&old, &logp, &adv, &mask);
//! let (gspo, clip) = (PolicyLossMode::Gspo, ClipConfig::default());
//! let out = policy_loss(gspo, inputs, &clip, LossAggMode::SeqMeanTokenMean, &info)?;
//! out.loss.backward();
//! assert_eq!(logp.grad().double_value(&[1, 1]), 0.0); // mask-0 token
//! # Ok::<(), RlError>(())
//! ```

mod advantages;
mod aggregation;
mod error;
mod groups;
mod kl;
mod masked;
mod names;
mod policy_loss;
mod report;
mod rollout_corr;

pub use advantages::{
    gae_advantages, group_advantages, grpo_advantages, reinforce_plus_plus_advantages,
    token_level_rewards, AdvEstimator, GroupEstimator, GRPO_EPSILON,
};
pub use aggregation::{agg_loss, GlobalBatchInfo, LossAggMode};
pub use error::{RlError, RlResult};
pub use groups::Groups;
pub use kl::{entropy_from_logits, kl_penalty, KlEstimator, KlKind};
pub use masked::{masked_mean, masked_sum, masked_var, masked_whiten};
pub use policy_loss::{policy_loss, ClipConfig, LossInputs, PolicyLoss, PolicyLossMode};
pub use report::{rl_report, LossReport, RlBatch, RlBatchConfig, RlReport};
pub use rollout_corr::{
    is_weights, rejection_mask, rollout_correction, CorrectionMetrics, IsConfig, IsLevel,
    RolloutCorrection, RsCriterion, RsStatistic,
};
