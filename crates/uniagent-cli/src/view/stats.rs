//! Run statistics (success, reward distribution, exit reasons, tokens, timings) and the
//! comparison of two runs on their common tasks.

use std::collections::BTreeMap;

use serde::Serialize;

use super::index::Entry;
use super::row::TrajRow;

/// Bins of the reward histogram.
const REWARD_BINS: usize = 10;

/// Statistics of one run's trajectories.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct RunStats {
    /// Trajectories.
    pub rollouts: usize,
    /// Distinct tasks.
    pub tasks: usize,
    /// Rewarded rollouts that succeeded.
    pub succeeded: usize,
    /// `succeeded / rollouts` (0 without rollouts).
    pub success_rate: f64,
    /// Mean reward score over rewarded rollouts.
    pub mean_reward: Option<f64>,
    /// Histogram of reward scores.
    pub reward_hist: Histogram,
    /// Rollouts per exit reason.
    pub exit_reasons: BTreeMap<String, usize>,
    /// Token totals and means.
    pub tokens: TokenStats,
    /// Mean seconds per phase, and the slowest rollout.
    pub timings: TimingStats,
    /// Training steps present (`train` output), ascending.
    pub steps: Vec<u64>,
    /// Weight versions present, smallest and largest.
    pub versions: Option<(u64, u64)>,
}

/// Equal-width bins over `[lo, hi]`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct Histogram {
    /// Lower edge of the first bin.
    pub lo: f64,
    /// Upper edge of the last bin.
    pub hi: f64,
    /// Count per bin.
    pub counts: Vec<usize>,
}

/// Token counts of a run.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub(super) struct TokenStats {
    /// Prompt tokens, summed.
    pub prompt: u64,
    /// Response tokens (sampled + inserted), summed.
    pub response: u64,
    /// Sampled tokens (mask 1), summed.
    pub sampled: u64,
    /// Mean response tokens per rollout.
    pub mean_response: f64,
    /// Mean assistant turns per rollout.
    pub mean_turns: f64,
}

/// Mean time per phase (seconds).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub(super) struct TimingStats {
    /// Whole rollout.
    pub total: f64,
    /// Model calls.
    pub model: f64,
    /// Tool calls.
    pub tools: f64,
    /// Reward.
    pub reward: f64,
    /// Sandbox start and stop.
    pub sandbox: f64,
    /// The slowest rollout's total.
    pub max_total: f64,
}

/// Computes the statistics of `rows`.
pub(super) fn run_stats(rows: &[Entry<TrajRow>]) -> RunStats {
    let n = rows.len();
    let mut tasks = std::collections::HashSet::new();
    let mut exit_reasons = BTreeMap::new();
    let mut steps = std::collections::BTreeSet::new();
    let mut scores = Vec::new();
    let (mut succeeded, mut tokens, mut t) = (0, TokenStats::default(), TimingStats::default());
    let mut turns = 0u64;
    let mut versions: Option<(u64, u64)> = None;
    for e in rows {
        let r = &e.row;
        tasks.insert(r.task_id.as_str());
        *exit_reasons.entry(r.exit_reason.clone()).or_insert(0) += 1;
        succeeded += usize::from(r.success == Some(true));
        scores.extend(r.score);
        steps.extend(r.step);
        tokens.prompt += r.prompt_tokens;
        tokens.response += r.response_tokens;
        tokens.sampled += r.sampled_tokens;
        turns += r.turns;
        t.total += r.timings.total;
        t.model += r.timings.model;
        t.tools += r.timings.tools;
        t.reward += r.timings.reward;
        t.sandbox += r.timings.sandbox_start + r.timings.sandbox_stop;
        t.max_total = t.max_total.max(r.timings.total);
        if let (Some(lo), Some(hi)) = (r.version_min, r.version_max) {
            versions = Some(versions.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
    }
    let per = |x: f64| if n > 0 { x / n as f64 } else { 0.0 };
    tokens.mean_response = per(tokens.response as f64);
    tokens.mean_turns = per(turns as f64);
    let timings = TimingStats {
        total: per(t.total),
        model: per(t.model),
        tools: per(t.tools),
        reward: per(t.reward),
        sandbox: per(t.sandbox),
        max_total: t.max_total,
    };
    RunStats {
        rollouts: n,
        tasks: tasks.len(),
        succeeded,
        success_rate: per(succeeded as f64),
        mean_reward: (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64),
        reward_hist: histogram(&scores),
        exit_reasons,
        tokens,
        timings,
        steps: steps.into_iter().collect(),
        versions,
    }
}

fn histogram(scores: &[f64]) -> Histogram {
    let finite = scores.iter().copied().filter(|s| s.is_finite());
    let lo = finite.clone().fold(f64::INFINITY, f64::min).min(0.0);
    let hi = finite.clone().fold(f64::NEG_INFINITY, f64::max).max(1.0);
    let mut counts = vec![0; REWARD_BINS];
    let width = (hi - lo) / REWARD_BINS as f64;
    for s in finite {
        let bin = (((s - lo) / width) as usize).min(REWARD_BINS - 1);
        counts[bin] += 1;
    }
    Histogram { lo, hi, counts }
}

/// One task in a comparison of runs A and B.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct TaskPair {
    /// Task id.
    pub task_id: String,
    /// Rollouts and success rate in A.
    pub a: TaskScore,
    /// Rollouts and success rate in B.
    pub b: TaskScore,
    /// `gained` (fails in A, passes in B), `lost` (the reverse), or `null`.
    pub flip: Option<&'static str>,
}

/// A task's result in one run.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub(super) struct TaskScore {
    /// Rollouts of the task.
    pub rollouts: usize,
    /// Their success rate.
    pub success_rate: f64,
    /// Their mean reward score (0 for unrewarded).
    pub mean_reward: f64,
}

impl TaskScore {
    /// A task passes in a run when at least half its rollouts succeeded.
    pub(super) fn passes(&self) -> bool {
        self.rollouts > 0 && self.success_rate >= 0.5
    }
}

/// The comparison of two runs on the tasks both have.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct Comparison {
    /// Tasks in both runs.
    pub common: usize,
    /// Tasks only in A.
    pub only_a: usize,
    /// Tasks only in B.
    pub only_b: usize,
    /// Common tasks passing in A, and in B.
    pub passing: (usize, usize),
    /// Tasks that fail in A and pass in B.
    pub gained: usize,
    /// Tasks that pass in A and fail in B.
    pub lost: usize,
    /// Every common task, flipped ones first.
    pub tasks: Vec<TaskPair>,
}

fn per_task(rows: &[Entry<TrajRow>]) -> BTreeMap<&str, TaskScore> {
    let mut out: BTreeMap<&str, (usize, usize, f64)> = BTreeMap::new();
    for e in rows {
        let s = out.entry(e.row.task_id.as_str()).or_default();
        s.0 += 1;
        s.1 += usize::from(e.row.success == Some(true));
        s.2 += e.row.score.unwrap_or(0.0);
    }
    out.into_iter()
        .map(|(k, (n, ok, sum))| {
            let score = TaskScore {
                rollouts: n,
                success_rate: ok as f64 / n as f64,
                mean_reward: sum / n as f64,
            };
            (k, score)
        })
        .collect()
}

/// Compares runs `a` and `b` task by task.
pub(super) fn compare(a: &[Entry<TrajRow>], b: &[Entry<TrajRow>]) -> Comparison {
    let (ta, tb) = (per_task(a), per_task(b));
    let mut tasks: Vec<TaskPair> = ta
        .iter()
        .filter_map(|(id, &sa)| {
            let sb = *tb.get(id)?;
            let flip = match (sa.passes(), sb.passes()) {
                (false, true) => Some("gained"),
                (true, false) => Some("lost"),
                _ => None,
            };
            Some(TaskPair {
                task_id: (*id).to_owned(),
                a: sa,
                b: sb,
                flip,
            })
        })
        .collect();
    let common = tasks.len();
    tasks.sort_by_key(|t| t.flip.is_none());
    let count = |f: &str| tasks.iter().filter(|t| t.flip == Some(f)).count();
    Comparison {
        common,
        only_a: ta.len() - common,
        only_b: tb.len() - common,
        passing: (
            tasks.iter().filter(|t| t.a.passes()).count(),
            tasks.iter().filter(|t| t.b.passes()).count(),
        ),
        gained: count("gained"),
        lost: count("lost"),
        tasks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::row::extract;

    fn rows(lines: &[&str]) -> Vec<Entry<TrajRow>> {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| Entry {
                offset: 0,
                len: 0,
                line: i as u64 + 1,
                row: extract(l.as_bytes()).unwrap(),
            })
            .collect()
    }

    fn traj(task: &str, ok: bool) -> String {
        format!(
            r#"{{"task_id":"{task}","exit_reason":"finished","reward":{{"score":{},"success":{ok}}},"timings":{{"total":2.0}}}}"#,
            u8::from(ok)
        )
    }

    #[test]
    fn stats_and_flips() {
        let a = rows(&[&traj("x", true), &traj("y", false), &traj("z", true)]);
        let b = rows(&[&traj("x", false), &traj("y", true), &traj("w", true)]);
        let s = run_stats(&a);
        assert_eq!((s.rollouts, s.tasks, s.succeeded), (3, 3, 2));
        assert_eq!(s.reward_hist.counts[0], 1);
        assert_eq!(s.reward_hist.counts[9], 2);
        assert_eq!(s.timings.total, 2.0);
        let c = compare(&a, &b);
        assert_eq!(
            (c.common, c.only_a, c.only_b, c.gained, c.lost),
            (2, 1, 1, 1, 1)
        );
        assert!(c.tasks.iter().all(|t| t.flip.is_some()));
        assert_eq!(
            c.tasks.iter().find(|t| t.task_id == "y").unwrap().flip,
            Some("gained")
        );
        let empty = run_stats(&[]);
        assert_eq!(
            (empty.rollouts, empty.success_rate, empty.mean_reward),
            (0, 0.0, None)
        );
    }
}
