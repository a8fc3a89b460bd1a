//! Per-step diagnostics computed from the data: trainer vs rollout log-probs, staleness from
//! the exported weight versions, groups that carry a learning signal.

use std::collections::BTreeMap;

use tch::{Device, Kind, Tensor};
use uniagent_core::agent::Trajectory;
use uniagent_core::{AgentLoopOutput, Error, Result};

use crate::model::Qwen2ForCausalLM;

/// Trainer vs rollout log-probs over the mask-1 tokens that have rollout log-probs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RatioStats {
    /// Largest `|log π_trainer − log π_rollout|`.
    pub max_abs_diff: f64,
    /// Mean importance ratio `π_trainer / π_rollout`.
    pub mean_ratio: f64,
    /// Largest importance ratio.
    pub max_ratio: f64,
    /// KL(behaviour ‖ current), estimated on the sampled tokens (k1: mean of
    /// `log π_rollout − log π_trainer`).
    pub kl_behaviour_current: f64,
    /// Tokens compared.
    pub tokens: usize,
}

/// Recomputes, for every mask-1 response token, `log_softmax(policy(prompt ++ response) /
/// temperature)` at the position that predicts it (1 for raw engine logprobs, the rollout
/// temperature for processed ones) and compares it with the rollout's. With the engine holding
/// the trainer's weights the ratio is 1; otherwise positions, masks or logprobs are wrong.
pub fn ratio_stats(
    model: &Qwen2ForCausalLM,
    rows: &[&AgentLoopOutput],
    temperature: f64,
) -> Result<RatioStats> {
    let mut s = RatioStats::default();
    let (mut ratio_sum, mut kl_sum) = (0.0f64, 0.0f64);
    for row in rows {
        let Some(rollout) = row.response_logprobs.as_deref() else {
            continue;
        };
        let sampled: Vec<usize> = (0..row.response_ids.len())
            .filter(|&t| row.response_mask.get(t) == Some(&1))
            .collect();
        if sampled.is_empty() || row.prompt_ids.is_empty() {
            continue;
        }
        let p = row.prompt_ids.len();
        let ids: Vec<i64> = row
            .prompt_ids
            .iter()
            .chain(&row.response_ids)
            .map(|&t| i64::from(t))
            .collect();
        let positions: Vec<i64> = sampled.iter().map(|&t| (p + t - 1) as i64).collect();
        let targets: Vec<i64> = sampled
            .iter()
            .map(|&t| i64::from(row.response_ids[t]))
            .collect();
        let device = model.device();
        let trainer: Vec<f32> = tch::no_grad(|| -> Result<Vec<f32>> {
            let input = Tensor::from_slice(&ids).view([1, -1]).to_device(device);
            let logits = model.forward(&input, None, None, None)?.get(0);
            let picked = logits.index_select(0, &Tensor::from_slice(&positions).to_device(device));
            let logp = (picked.to_kind(Kind::Float) / temperature)
                .log_softmax(-1, Kind::Float)
                .gather(
                    1,
                    &Tensor::from_slice(&targets).to_device(device).unsqueeze(1),
                    false,
                )
                .squeeze_dim(1)
                .to_device(Device::Cpu);
            Vec::<f32>::try_from(logp)
                .map_err(|e| Error::internal(format!("reading logprobs: {e}")))
        })?;
        for (k, &t) in sampled.iter().enumerate() {
            let Some(&old) = rollout.get(t) else { continue };
            let diff = f64::from(trainer[k]) - f64::from(old);
            s.max_abs_diff = s.max_abs_diff.max(diff.abs());
            let ratio = diff.exp();
            s.max_ratio = s.max_ratio.max(ratio);
            ratio_sum += ratio;
            kl_sum -= diff;
            s.tokens += 1;
        }
    }
    let n = s.tokens.max(1) as f64;
    s.mean_ratio = if s.tokens == 0 { 1.0 } else { ratio_sum / n };
    s.kl_behaviour_current = kl_sum / n;
    Ok(s)
}

/// Staleness of every sampled token: `current − version` over the non-null entries of the
/// exported `weight_versions`, as a histogram (staleness → tokens).
pub fn staleness_histogram(ts: &[&Trajectory], current: u64) -> BTreeMap<u64, usize> {
    let mut hist = BTreeMap::new();
    for t in ts {
        for v in t.output.weight_versions.iter().flatten().flatten() {
            *hist.entry(current.saturating_sub(*v)).or_insert(0) += 1;
        }
    }
    hist
}

/// Staleness per trained sample and the partial-rollout resumes behind it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SampleStaleness {
    /// `current − v_min` → samples, where `v_min` is the oldest weight version a sample's
    /// sampled tokens came from (the version its rollout started on).
    pub hist: BTreeMap<u64, usize>,
    /// Times a rollout went on with newer weights: the version changes along each sample's
    /// sampled tokens, summed (a partial rollout that spans two syncs counts 2).
    pub partial_resumes: usize,
    /// Samples with at least one such change.
    pub resumed_samples: usize,
}

/// [`SampleStaleness`] of the samples whose per-token weight versions are given (the
/// exported `weight_versions`; `None` entries are tokens the policy did not sample). A
/// sample without a versioned token is not counted.
///
/// ```
/// use uniagent_train::pipeline::sample_staleness;
/// let started_on_3_resumed_on_4 = [Some(3), None, Some(3), Some(4)];
/// let fresh = [Some(5), Some(5)];
/// let s = sample_staleness([&started_on_3_resumed_on_4[..], &fresh[..], &[None][..]], 5);
/// assert_eq!(s.hist.into_iter().collect::<Vec<_>>(), [(0, 1), (2, 1)]);
/// assert_eq!((s.partial_resumes, s.resumed_samples), (1, 1));
/// ```
pub fn sample_staleness<'a>(
    samples: impl IntoIterator<Item = &'a [Option<u64>]>,
    current: u64,
) -> SampleStaleness {
    let mut out = SampleStaleness::default();
    for versions in samples {
        let mut sampled = versions.iter().flatten().copied();
        let Some(first) = sampled.next() else {
            continue;
        };
        let (mut oldest, mut previous, mut changes) = (first, first, 0);
        for v in sampled {
            oldest = oldest.min(v);
            changes += usize::from(v != previous);
            previous = v;
        }
        *out.hist.entry(current.saturating_sub(oldest)).or_insert(0) += 1;
        out.partial_resumes += changes;
        out.resumed_samples += usize::from(changes > 0);
    }
    out
}

/// Share of groups (rows with the same task) whose rewards differ: only those carry a GRPO
/// learning signal.
pub fn mixed_groups(rows: &[(&str, f64)]) -> f64 {
    let mut groups: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for &(task, r) in rows {
        let e = groups.entry(task).or_insert((r, r));
        e.0 = e.0.min(r);
        e.1 = e.1.max(r);
    }
    let mixed = groups.values().filter(|(lo, hi)| hi > lo).count();
    mixed as f64 / groups.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_counts_once_at_its_oldest_version_and_each_resume_counts() {
        // Started on 1, resumed on 2 then 3: staleness 4 − 1 = 3, two resumes.
        let twice = [Some(1), Some(1), None, Some(2), Some(3), Some(3)];
        let once = [Some(3), Some(4)];
        let s = sample_staleness([&twice[..], &once[..], &once[..]], 4);
        assert_eq!(s.hist, BTreeMap::from([(1, 2), (3, 1)]));
        assert_eq!((s.partial_resumes, s.resumed_samples), (4, 3));
    }

    #[test]
    fn samples_without_versioned_tokens_are_not_counted() {
        let s = sample_staleness([&[][..], &[None, None][..]], 7);
        assert_eq!(s, SampleStaleness::default());
        // A version newer than the trainer's (cannot happen) reads as fresh, never wraps.
        let s = sample_staleness([&[Some(9)][..]], 7);
        assert_eq!(s.hist, BTreeMap::from([(0, 1)]));
    }
}
