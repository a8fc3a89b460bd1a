//! A batch of trajectories and its padded tensor form.

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};
use uniagent_core::{AgentLoopOutput, Error, Result};

use crate::rl::{group_advantages, token_level_rewards, GroupEstimator, Groups, GRPO_EPSILON};

/// Trajectories for one optimizer step (one mini-batch), with per-token advantages for RL.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainBatch {
    /// The rollouts, as the loop produced them.
    pub rows: Vec<AgentLoopOutput>,
    /// `advantages[i][t]` for response token `t` of row `i` (RL mode; ignored by SFT). Rows
    /// may be shorter than the response: missing entries count as 0.
    pub advantages: Option<Vec<Vec<f32>>>,
}

impl TrainBatch {
    /// A batch for SFT (no advantages).
    pub fn sft(rows: Vec<AgentLoopOutput>) -> Self {
        Self {
            rows,
            advantages: None,
        }
    }

    /// A batch whose advantages are verl's GRPO outcome advantages: rows with equal `uids`
    /// form a group, each row's score is its `reward_score` (missing = 0).
    pub fn with_grpo(
        rows: Vec<AgentLoopOutput>,
        uids: &[String],
        norm_by_std: bool,
    ) -> Result<Self> {
        let sessions: Vec<String> = (0..rows.len()).map(|i| i.to_string()).collect();
        Self::with_grpo_sessions(rows, uids, &sessions, norm_by_std)
    }

    /// GRPO over sessions: rows with equal `uids` form a group, and rows of a group with
    /// equal `sessions` are the chains of one session (a harness run the gateway split,
    /// say). A session is one member of its group, scored by the mean of its chains' scores;
    /// each of its `k` chains gets the session's advantage over `k`, so a session counts once
    /// however often it forked. With one row per session this is [`Self::with_grpo`].
    ///
    /// ```
    /// use uniagent_core::rollout::AgentLoopMetrics;
    /// use uniagent_core::AgentLoopOutput;
    /// use uniagent_train::trainer::TrainBatch;
    ///
    /// let row = |score: f64| AgentLoopOutput {
    ///     prompt_ids: vec![1],
    ///     response_ids: vec![2, 3],
    ///     response_mask: vec![1, 1],
    ///     response_logprobs: None,
    ///     weight_versions: None,
    ///     reward_score: Some(score),
    ///     num_turns: 1,
    ///     metrics: AgentLoopMetrics::default(),
    ///     extra_fields: Default::default(),
    ///     token_sources: None,
    ///     rerender_ids: None,
    /// };
    /// let uids = vec!["t".to_owned(); 3];
    /// // Session `t:0` forked into two chains; `t:1` did not.
    /// let sessions = ["t:0", "t:0", "t:1"].map(String::from);
    /// let batch = TrainBatch::with_grpo_sessions(vec![row(1.0), row(1.0), row(0.0)], &uids, &sessions, false)?;
    /// let adv = batch.advantages.unwrap();
    /// assert_eq!((adv[0][0], adv[1][0], adv[2][0]), (0.25, 0.25, -0.5));
    /// # Ok::<(), uniagent_core::Error>(())
    /// ```
    pub fn with_grpo_sessions(
        rows: Vec<AgentLoopOutput>,
        uids: &[String],
        sessions: &[String],
        norm_by_std: bool,
    ) -> Result<Self> {
        let grpo = GroupEstimator::Grpo {
            norm_by_std,
            epsilon: GRPO_EPSILON,
        };
        Self::with_group_sessions(rows, uids, sessions, grpo)
    }

    /// [`Self::with_grpo_sessions`] with any group estimator: GRPO and RLOO score sessions as
    /// above; REINFORCE++-baseline whitens over every response token of the batch (as verl
    /// does), so it needs one row per session (a forked session is an error).
    ///
    /// ```
    /// # use uniagent_core::rollout::AgentLoopMetrics;
    /// # use uniagent_core::AgentLoopOutput;
    /// use uniagent_train::rl::GroupEstimator;
    /// use uniagent_train::trainer::TrainBatch;
    /// # let row = |score: f64| AgentLoopOutput {
    /// #     prompt_ids: vec![1], response_ids: vec![2, 3], response_mask: vec![1, 1],
    /// #     response_logprobs: None, weight_versions: None, reward_score: Some(score),
    /// #     num_turns: 1, metrics: AgentLoopMetrics::default(),
    /// #     extra_fields: Default::default(), token_sources: None, rerender_ids: None,
    /// # };
    /// let uids = vec!["t".to_owned(); 2];
    /// let sessions = ["a", "b"].map(String::from);
    /// let batch = TrainBatch::with_group_sessions(vec![row(1.0), row(0.0)], &uids, &sessions, GroupEstimator::Rloo)?;
    /// assert_eq!(batch.advantages.unwrap()[0], vec![1.0, 1.0]); // 1·2/1 − 0.5·2/1
    /// # Ok::<(), uniagent_core::Error>(())
    /// ```
    pub fn with_group_sessions(
        rows: Vec<AgentLoopOutput>,
        uids: &[String],
        sessions: &[String],
        estimator: GroupEstimator,
    ) -> Result<Self> {
        if uids.len() != rows.len() || sessions.len() != rows.len() {
            return Err(Error::invalid_input(format!(
                "{} uids and {} sessions for {} rows",
                uids.len(),
                sessions.len(),
                rows.len()
            )));
        }
        let padded = PaddedBatch::new(&rows, None, usize::MAX, Device::Cpu)?;
        // Sessions in order of first appearance, keyed within their group.
        let mut index: HashMap<(&str, &str), usize> = HashMap::new();
        let mut session_of_row = Vec::with_capacity(rows.len());
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut session_uids: Vec<&str> = Vec::new();
        for (row, (uid, session)) in uids.iter().zip(sessions).enumerate() {
            let s = *index.entry((uid, session)).or_insert_with(|| {
                members.push(Vec::new());
                session_uids.push(uid);
                members.len() - 1
            });
            members[s].push(row);
            session_of_row.push(s);
        }
        let score = |row: usize| rows[row].reward_score.unwrap_or(0.0) as f32;
        if estimator == GroupEstimator::ReinforcePlusPlusBaseline {
            if members.len() != rows.len() {
                return Err(Error::invalid_input(
                    "reinforce_plus_plus_baseline whitens over every token of the batch and \
                     needs one row per session; a session forked into several chains",
                ));
            }
            let scores: Vec<f32> = (0..rows.len()).map(score).collect();
            let mask = &padded.response_mask;
            let rewards =
                token_level_rewards(&Tensor::from_slice(&scores), mask).map_err(rl_error)?;
            let adv = group_advantages(estimator, &rewards, mask, &Groups::from_uids(uids))
                .map_err(rl_error)?
                .to_kind(Kind::Float);
            let advantages = (0..rows.len())
                .map(|row| {
                    Vec::<f32>::try_from(adv.get(row as i64))
                        .map_err(crate::model::tch_error("reading advantages"))
                })
                .collect::<Result<_>>()?;
            return Ok(Self {
                rows,
                advantages: Some(advantages),
            });
        }
        let session_scores: Vec<f32> = members
            .iter()
            .map(|m| m.iter().map(|&r| score(r)).sum::<f32>() / m.len() as f32)
            .collect();
        let n = session_scores.len() as i64;
        let scores = Tensor::from_slice(&session_scores);
        let one_token = Tensor::ones([n, 1], (Kind::Float, Device::Cpu));
        let rewards = token_level_rewards(&scores, &one_token).map_err(rl_error)?;
        let adv = group_advantages(
            estimator,
            &rewards,
            &one_token,
            &Groups::from_uids(&session_uids),
        )
        .map_err(rl_error)?;
        let session_adv = Vec::<f32>::try_from(adv.view([n]).to_kind(Kind::Float))
            .map_err(crate::model::tch_error("reading advantages"))?;
        let mut advantages = Vec::with_capacity(rows.len());
        for (row, &s) in session_of_row.iter().enumerate() {
            let mask = Vec::<f32>::try_from(padded.response_mask.get(row as i64))
                .map_err(crate::model::tch_error("reading the response mask"))?;
            let a = session_adv[s] / members[s].len() as f32;
            advantages.push(mask.iter().map(|&m| a * m).collect());
        }
        Ok(Self {
            rows,
            advantages: Some(advantages),
        })
    }
}

pub(crate) fn rl_error(e: crate::rl::RlError) -> Error {
    Error::invalid_input(format!("RL numerics: {e}"))
}

/// Right-padded tensors of a batch: `input_ids`/`attention_mask` `[B, L]` (prompt then
/// response), and per response token `[B, R]`: the id, the mask, the index of the position
/// whose logits predict it, the rollout logprob and the advantage.
#[derive(Debug)]
pub(crate) struct PaddedBatch {
    pub(crate) input_ids: Tensor,
    pub(crate) attention_mask: Tensor,
    pub(crate) response_ids: Tensor,
    pub(crate) response_mask: Tensor,
    pub(crate) predict_index: Tensor,
    pub(crate) rollout_logprobs: Tensor,
    pub(crate) advantages: Tensor,
}

impl PaddedBatch {
    pub(crate) fn new(
        rows: &[AgentLoopOutput],
        advantages: Option<&[Vec<f32>]>,
        vocab: usize,
        device: Device,
    ) -> Result<Self> {
        if rows.is_empty() {
            return Err(Error::invalid_input(
                "a training batch needs at least one row",
            ));
        }
        let width = rows
            .iter()
            .map(|r| r.prompt_ids.len() + r.response_ids.len())
            .max()
            .unwrap_or(0);
        let resp = rows.iter().map(|r| r.response_ids.len()).max().unwrap_or(0);
        if resp == 0 {
            return Err(Error::invalid_input(
                "every row of the batch has an empty response",
            ));
        }
        let (b, l, r) = (rows.len(), width, resp);
        let mut ids = vec![0i64; b * l];
        let mut attn = vec![0i64; b * l];
        let mut rids = vec![0i64; b * r];
        let mut rmask = vec![0f32; b * r];
        let mut index = vec![0i64; b * r];
        let mut old = vec![0f32; b * r];
        let mut adv = vec![0f32; b * r];
        for (i, row) in rows.iter().enumerate() {
            if row.prompt_ids.is_empty() {
                return Err(Error::invalid_input(format!("row {i}: empty prompt")));
            }
            if row.response_mask.len() != row.response_ids.len() {
                return Err(Error::invalid_input(format!(
                    "row {i}: {} response ids but {} mask entries",
                    row.response_ids.len(),
                    row.response_mask.len()
                )));
            }
            if let Some(bad) = row
                .prompt_ids
                .iter()
                .chain(&row.response_ids)
                .find(|&&t| t as usize >= vocab)
            {
                return Err(Error::invalid_input(format!(
                    "row {i}: token id {bad} is outside the vocabulary"
                )));
            }
            let p = row.prompt_ids.len();
            for (k, &t) in row.prompt_ids.iter().chain(&row.response_ids).enumerate() {
                ids[i * l + k] = i64::from(t);
                attn[i * l + k] = 1;
            }
            let logprobs = row.response_logprobs.as_deref();
            let row_adv = advantages.and_then(|a| a.get(i));
            for (t, &token) in row.response_ids.iter().enumerate() {
                let at = i * r + t;
                rids[at] = i64::from(token);
                rmask[at] = if row.response_mask[t] != 0 { 1.0 } else { 0.0 };
                index[at] = (p + t - 1) as i64;
                old[at] = logprobs.and_then(|lp| lp.get(t)).copied().unwrap_or(0.0);
                adv[at] = row_adv.and_then(|a| a.get(t)).copied().unwrap_or(0.0) * rmask[at];
            }
        }
        let two = |v: Vec<i64>, w: usize| {
            Tensor::from_slice(&v)
                .view([b as i64, w as i64])
                .to_device(device)
        };
        let twof = |v: Vec<f32>| {
            Tensor::from_slice(&v)
                .view([b as i64, r as i64])
                .to_device(device)
        };
        Ok(Self {
            input_ids: two(ids, l),
            attention_mask: two(attn, l),
            response_ids: two(rids, r),
            response_mask: twof(rmask),
            predict_index: two(index, r),
            rollout_logprobs: twof(old),
            advantages: twof(adv),
        })
    }

    pub(crate) fn rows(&self) -> i64 {
        self.input_ids.size()[0]
    }

    /// Rows `start..start + len` of every tensor.
    pub(crate) fn slice(&self, start: i64, len: i64) -> PaddedBatch {
        let s = |t: &Tensor| t.narrow(0, start, len);
        PaddedBatch {
            input_ids: s(&self.input_ids),
            attention_mask: s(&self.attention_mask),
            response_ids: s(&self.response_ids),
            response_mask: s(&self.response_mask),
            predict_index: s(&self.predict_index),
            rollout_logprobs: s(&self.rollout_logprobs),
            advantages: s(&self.advantages),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uniagent_core::rollout::AgentLoopMetrics;

    fn row(score: f64, len: usize) -> AgentLoopOutput {
        AgentLoopOutput {
            prompt_ids: vec![1],
            response_ids: vec![2; len],
            response_mask: vec![1; len],
            response_logprobs: None,
            weight_versions: None,
            reward_score: Some(score),
            num_turns: 1,
            metrics: AgentLoopMetrics::default(),
            extra_fields: Default::default(),
            token_sources: None,
            rerender_ids: None,
        }
    }

    /// REINFORCE++-baseline whitens over the batch's real tokens, so rows of different lengths
    /// weigh by their tokens: the batch's values equal the estimator on the padded tensors.
    #[test]
    fn reinforce_plus_plus_baseline_whitens_over_real_tokens() {
        let rows = vec![row(1.0, 3), row(0.0, 1), row(0.5, 2), row(0.0, 2)];
        let uids = ["a", "a", "b", "b"].map(String::from);
        let sessions = ["0", "1", "2", "3"].map(String::from);
        let estimator = GroupEstimator::ReinforcePlusPlusBaseline;
        let batch =
            TrainBatch::with_group_sessions(rows.clone(), &uids, &sessions, estimator).unwrap();
        let padded = PaddedBatch::new(&rows, None, usize::MAX, Device::Cpu).unwrap();
        let scores = Tensor::from_slice(&[1.0f32, 0.0, 0.5, 0.0]);
        let rewards = token_level_rewards(&scores, &padded.response_mask).unwrap();
        let want = group_advantages(
            estimator,
            &rewards,
            &padded.response_mask,
            &Groups::from_uids(&uids),
        )
        .unwrap();
        let got = batch.advantages.unwrap();
        for (i, row) in got.iter().enumerate() {
            for (t, a) in row.iter().enumerate() {
                let w = want.double_value(&[i as i64, t as i64]) as f32;
                assert!((a - w).abs() < 1e-6, "row {i} token {t}: {a} vs {w}");
            }
        }
        // A forked session cannot be whitened token by token: a typed error.
        let forked = ["0", "0", "2", "3"].map(String::from);
        let err = TrainBatch::with_group_sessions(rows, &uids, &forked, estimator).unwrap_err();
        assert!(err.to_string().contains("one row per session"), "{err}");
    }
}
