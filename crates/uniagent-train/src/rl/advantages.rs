//! Advantage estimators with verl 0.9.1's semantics (`verl/trainer/ppo/core_algos.py`).
//!
//! Notation: `r[i,t]` token-level rewards, `m[i,t]` the response mask, `score_i = Σ_t r[i,t]`
//! (over **all** positions, masked or not), groups = rows with equal `uid` ([`Groups`]). All
//! estimators run without gradient and return tensors of the rewards' shape and kind.

use tch::{Kind, Tensor};

use super::error::{expect_2d, expect_shape, RlError, RlResult};
use super::groups::Groups;
use super::masked::{as_values, masked_whiten};

/// GRPO's default ε, added to the group std.
pub const GRPO_EPSILON: f64 = 1e-6;

/// Puts each row's score at one position of an all-zero `[B, T]` tensor: the last mask-1
/// position of the row, or the last column when the row has none. Estimators that sum the
/// rewards (GRPO, RLOO, REINFORCE++-baseline) do not depend on the position.
pub fn token_level_rewards(scores: &Tensor, response_mask: &Tensor) -> RlResult<Tensor> {
    let [b, t] = expect_2d("response_mask", response_mask)?;
    expect_shape("scores", scores, &[b])?;
    if t == 0 {
        return Err(RlError::InvalidBatch("a response of width 0".into()));
    }
    let m = as_values(response_mask, Kind::Int64);
    // position of the last mask-1 token: argmax of (mask · column index), T−1 when empty.
    let cols = Tensor::arange(t, (Kind::Int64, scores.device())).unsqueeze(0);
    let any = m.sum_dim_intlist(-1, false, Kind::Int64).gt(0);
    let last = (&m * &cols).argmax(-1, false);
    let last = last.where_self(&any, &Tensor::from(t - 1).to_device(scores.device()));
    let rewards = Tensor::zeros([b, t], (scores.kind(), scores.device()));
    Ok(rewards.scatter(1, &last.unsqueeze(-1), &scores.unsqueeze(-1)))
}

fn scores_of(
    token_level_rewards: &Tensor,
    response_mask: &Tensor,
    groups: &Groups,
) -> RlResult<Tensor> {
    let [b, t] = expect_2d("token_level_rewards", token_level_rewards)?;
    expect_shape("response_mask", response_mask, &[b, t])?;
    if groups.rows() as i64 != b {
        return Err(RlError::Shape {
            what: "uid",
            expected: vec![b],
            got: vec![groups.rows() as i64],
        });
    }
    Ok(token_level_rewards.sum_dim_intlist(-1, false, token_level_rewards.kind()))
}

/// Per-row group mean (and unbiased std when `with_std`), singletons μ = 0, σ = 1.
fn group_stats(scores: &Tensor, groups: &Groups, with_std: bool) -> (Tensor, Tensor) {
    let kind = scores.kind();
    let device = scores.device();
    let b = groups.rows() as i64;
    let mut mean = Tensor::zeros([b], (kind, device));
    let mut std = Tensor::ones([b], (kind, device));
    for rows in groups.members() {
        if rows.len() < 2 {
            continue;
        }
        let idx: Vec<i64> = rows.iter().map(|r| *r as i64).collect();
        let idx = Tensor::from_slice(&idx).to_device(device);
        let members = scores.index_select(0, &idx);
        let group_mean = members.mean(kind);
        mean = mean.index_fill_int_tensor(0, &idx, &group_mean);
        if with_std {
            let group_std = members.std(true);
            std = std.index_fill_int_tensor(0, &idx, &group_std);
        }
    }
    (mean, std)
}

/// A group-relative outcome estimator: each row's advantage is its score against the other
/// rows of its group, the same on every response token (`A_i · m[i,t]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GroupEstimator {
    /// GRPO (`compute_grpo_outcome_advantage`): per group, μ = mean and σ = `torch.std`
    /// (unbiased, n−1) of the scores; singletons get μ = 0, σ = 1.
    /// `A_i = (score_i − μ)/(σ + ε)`, or `score_i − μ` when `norm_by_std` is false (Dr.GRPO).
    /// A group of identical scores gets 0.
    Grpo {
        /// Divide by the group std (false: Dr.GRPO).
        norm_by_std: bool,
        /// ε added to the std ([`GRPO_EPSILON`] in verl).
        epsilon: f64,
    },
    /// RLOO (`compute_rloo_outcome_advantage`, the non-vectorised estimator):
    /// `A_i = score_i·n/(n−1) − μ·n/(n−1)` for a group of n > 1; a singleton keeps its score.
    Rloo,
    /// REINFORCE++ with a group baseline
    /// (`compute_reinforce_plus_plus_baseline_outcome_advantage`):
    /// `x[i,t] = (score_i − μ_g)·m[i,t]` (singletons μ = 0), then `masked_whiten(x, m)·m` over
    /// the whole batch. Errors when fewer than two tokens are masked in (verl raises).
    ReinforcePlusPlusBaseline,
}

/// An outcome advantage estimator by its verl name (`algorithm.adv_estimator`), as configs
/// select it; [`AdvEstimator::estimator`] gives the [`GroupEstimator`] with its parameters.
///
/// ```
/// use uniagent_train::rl::{AdvEstimator, GroupEstimator};
/// let rloo: AdvEstimator = "rloo".parse()?;
/// assert_eq!(rloo.estimator(true), GroupEstimator::Rloo);
/// assert!("gae".parse::<AdvEstimator>().is_err()); // needs a critic: not an outcome estimator
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdvEstimator {
    /// `grpo`: [`GroupEstimator::Grpo`].
    Grpo,
    /// `rloo`: [`GroupEstimator::Rloo`].
    Rloo,
    /// `reinforce_plus_plus_baseline`: [`GroupEstimator::ReinforcePlusPlusBaseline`].
    ReinforcePlusPlusBaseline,
}

impl AdvEstimator {
    /// Every estimator, in verl's order.
    pub const ALL: [AdvEstimator; 3] = [
        AdvEstimator::Grpo,
        AdvEstimator::Rloo,
        AdvEstimator::ReinforcePlusPlusBaseline,
    ];

    /// verl's name.
    pub fn as_str(self) -> &'static str {
        match self {
            AdvEstimator::Grpo => "grpo",
            AdvEstimator::Rloo => "rloo",
            AdvEstimator::ReinforcePlusPlusBaseline => "reinforce_plus_plus_baseline",
        }
    }

    /// The estimator; `norm_by_std` is GRPO's `norm_adv_by_std_in_grpo` (ignored by the
    /// others), with verl's ε.
    pub fn estimator(self, norm_by_std: bool) -> GroupEstimator {
        match self {
            AdvEstimator::Grpo => GroupEstimator::Grpo {
                norm_by_std,
                epsilon: GRPO_EPSILON,
            },
            AdvEstimator::Rloo => GroupEstimator::Rloo,
            AdvEstimator::ReinforcePlusPlusBaseline => GroupEstimator::ReinforcePlusPlusBaseline,
        }
    }
}

impl std::fmt::Display for AdvEstimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AdvEstimator {
    type Err = RlError;

    fn from_str(s: &str) -> RlResult<Self> {
        AdvEstimator::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| RlError::UnknownName {
                kind: "advantage estimator",
                name: s.to_owned(),
            })
    }
}

/// `estimator`'s advantages of a batch: `[B, T]` of the rewards' kind, 0 off the mask.
///
/// ```
/// use tch::Tensor;
/// use uniagent_train::rl::{group_advantages, GroupEstimator, Groups};
/// let rewards = Tensor::from_slice(&[0.0f32, 1.0, 0.0, 0.0]).view([2, 2]);
/// let mask = Tensor::from_slice(&[1i64, 1, 1, 1]).view([2, 2]);
/// let groups = Groups::from_uids(&["p", "p"]);
/// let adv = group_advantages(GroupEstimator::Rloo, &rewards, &mask, &groups)?;
/// assert_eq!(adv.double_value(&[0, 1]), 1.0); // score 1 against its group: 1·2/1 − 0.5·2/1
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
pub fn group_advantages(
    estimator: GroupEstimator,
    token_level_rewards: &Tensor,
    response_mask: &Tensor,
    groups: &Groups,
) -> RlResult<Tensor> {
    let _guard = tch::no_grad_guard();
    let scores = scores_of(token_level_rewards, response_mask, groups)?;
    let kind = scores.kind();
    let m = as_values(response_mask, kind);
    let with_std = matches!(
        estimator,
        GroupEstimator::Grpo {
            norm_by_std: true,
            ..
        }
    );
    let (mean, std) = group_stats(&scores, groups, with_std);
    // A row's advantage on each of its response tokens, 0 off the mask.
    let on_tokens = |per_row: Tensor| per_row.unsqueeze(-1) * &m;
    Ok(match estimator {
        GroupEstimator::Grpo {
            norm_by_std: true,
            epsilon,
        } => on_tokens((scores - mean) / (std + epsilon)),
        GroupEstimator::Grpo { .. } => on_tokens(scores - mean),
        GroupEstimator::Rloo => {
            let sizes: Vec<f64> = (0..groups.rows())
                .map(|r| groups.group_size_of_row(r) as f64)
                .collect();
            let n = Tensor::from_slice(&sizes)
                .to_kind(kind)
                .to_device(scores.device());
            let n_minus_1 = &n - 1.0;
            let loo = (&scores * &n) / &n_minus_1 - (mean * &n) / &n_minus_1;
            on_tokens(loo.where_self(&n.gt(1.0), &scores))
        }
        GroupEstimator::ReinforcePlusPlusBaseline => {
            masked_whiten(&on_tokens(scores - mean), response_mask)? * &m
        }
    })
}

/// GRPO's advantages ([`GroupEstimator::Grpo`]), the trainer's estimator.
///
/// ```
/// use tch::Tensor;
/// use uniagent_train::rl::{grpo_advantages, Groups, GRPO_EPSILON};
/// let rewards = Tensor::from_slice(&[0.0f32, 1.0, 0.0, 0.0]).view([2, 2]);
/// let mask = Tensor::from_slice(&[1i64, 1, 1, 1]).view([2, 2]);
/// let adv = grpo_advantages(&rewards, &mask, &Groups::from_uids(&["p", "p"]), true, GRPO_EPSILON)?;
/// assert!((adv.double_value(&[0, 0]) - 0.7071062).abs() < 1e-6);
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
pub fn grpo_advantages(
    token_level_rewards: &Tensor,
    response_mask: &Tensor,
    groups: &Groups,
    norm_by_std: bool,
    epsilon: f64,
) -> RlResult<Tensor> {
    let estimator = GroupEstimator::Grpo {
        norm_by_std,
        epsilon,
    };
    group_advantages(estimator, token_level_rewards, response_mask, groups)
}

/// REINFORCE++ (`compute_reinforce_plus_plus_outcome_advantage`): backward over t,
/// `G_t = r_t + γ·run`; on mask-1 tokens `returns_t = G_t`, `run = G_t`; on mask-0 tokens
/// `returns_t = 0` and `run` is carried. `advantages = masked_whiten(returns, m)·m`.
/// Returns `(advantages, returns)`.
pub fn reinforce_plus_plus_advantages(
    token_level_rewards: &Tensor,
    response_mask: &Tensor,
    gamma: f64,
) -> RlResult<(Tensor, Tensor)> {
    let _guard = tch::no_grad_guard();
    let [b, t] = expect_2d("token_level_rewards", token_level_rewards)?;
    expect_shape("response_mask", response_mask, &[b, t])?;
    let m = as_values(response_mask, token_level_rewards.kind());
    let mut columns = Vec::with_capacity(t as usize);
    let mut running = Tensor::zeros(
        [b],
        (token_level_rewards.kind(), token_level_rewards.device()),
    );
    for col in (0..t).rev() {
        let mt = m.select(1, col);
        let new_running = token_level_rewards.select(1, col) + &running * gamma;
        columns.push(&new_running * &mt);
        running = &new_running * &mt + &running * (1.0 - &mt);
    }
    columns.reverse();
    let returns = Tensor::stack(&columns, 1);
    let advantages = masked_whiten(&returns, response_mask)? * m;
    Ok((advantages, returns))
}

/// GAE (`compute_gae_advantage_return`): backward over t, `δ_t = r_t + γ·V_next − V_t`,
/// `g_t = δ_t + γλ·g_next`; on mask-0 tokens `V_next` and `g_next` are carried (observation
/// tokens are skipped). `returns = g + V`, `advantages = masked_whiten(g, m)` (not re-masked).
/// Returns `(advantages, returns)`.
pub fn gae_advantages(
    token_level_rewards: &Tensor,
    values: &Tensor,
    response_mask: &Tensor,
    gamma: f64,
    lam: f64,
) -> RlResult<(Tensor, Tensor)> {
    let _guard = tch::no_grad_guard();
    let [b, t] = expect_2d("token_level_rewards", token_level_rewards)?;
    expect_shape("values", values, &[b, t])?;
    expect_shape("response_mask", response_mask, &[b, t])?;
    let m = as_values(response_mask, token_level_rewards.kind());
    let zeros = Tensor::zeros(
        [b],
        (token_level_rewards.kind(), token_level_rewards.device()),
    );
    let mut next_values = zeros.shallow_clone();
    let mut last_gae = zeros;
    let mut columns = Vec::with_capacity(t as usize);
    for col in (0..t).rev() {
        let mt = m.select(1, col);
        let vt = values.select(1, col);
        let delta = token_level_rewards.select(1, col) + &next_values * gamma - &vt;
        let gae = delta + &last_gae * (gamma * lam);
        next_values = &vt * &mt + (1.0 - &mt) * &next_values;
        last_gae = &gae * &mt + (1.0 - &mt) * &last_gae;
        columns.push(last_gae.shallow_clone());
    }
    columns.reverse();
    let gae = Tensor::stack(&columns, 1);
    let returns = &gae + values;
    let advantages = masked_whiten(&gae, response_mask)?;
    Ok((advantages, returns))
}
