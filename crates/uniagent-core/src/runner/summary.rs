//! [`Summary`]: what a batch of rollouts came to.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::{ExitReason, PhaseTimings, Trajectory};

/// Total and mean of one quantity over the rollouts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Stat {
    /// Sum over rollouts.
    pub total: f64,
    /// Mean per rollout (0 when there are none).
    pub mean: f64,
    /// Largest value seen.
    pub max: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    total: f64,
    max: f64,
}

impl Acc {
    fn add(&mut self, v: f64) {
        self.total += v;
        self.max = self.max.max(v);
    }

    fn stat(self, n: u64) -> Stat {
        let mean = if n == 0 { 0.0 } else { self.total / n as f64 };
        Stat {
            total: self.total,
            mean,
            max: self.max,
        }
    }
}

/// Time per phase over the rollouts, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PhaseStats {
    /// Sandbox creation and start.
    pub sandbox_start: Stat,
    /// Model calls.
    pub model: Stat,
    /// Tool calls.
    pub tools: Stat,
    /// Reward computation.
    pub reward: Stat,
    /// Sandbox stop.
    pub sandbox_stop: Stat,
    /// Whole rollouts.
    pub total: Stat,
}

/// A rollout's phase times in [`PhaseStats`]' field order.
fn phase_seconds(t: &PhaseTimings) -> [f64; 6] {
    [
        t.sandbox_start,
        t.model,
        t.tools,
        t.reward,
        t.sandbox_stop,
        t.total,
    ]
}

/// The summary of a run: success rate, mean reward, how rollouts ended, turns, tokens, time.
///
/// ```
/// use uniagent_core::agent::{ExitReason, Trajectory};
/// use uniagent_core::runner::Summary;
///
/// let t = Trajectory::empty("t", 0, vec![], ExitReason::Cancelled, None);
/// let s = Summary::from_trajectories([&t], std::time::Duration::from_secs(1));
/// assert_eq!(s.rollouts, 1);
/// assert_eq!(s.exit_reasons[&ExitReason::Cancelled], 1);
/// // Every reason is listed, also those that did not occur.
/// assert_eq!(s.exit_reasons.len(), ExitReason::ALL.len());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Rollouts recorded.
    pub rollouts: u64,
    /// Rollouts whose reward says solved.
    pub succeeded: u64,
    /// `succeeded / rollouts` (0 when there are none).
    pub success_rate: f64,
    /// Rollouts with a reward.
    pub rewarded: u64,
    /// Mean reward over rollouts with a reward.
    pub mean_reward: Option<f64>,
    /// Rollouts excluded from training.
    pub masked: u64,
    /// How many rollouts ended each way (every reason, zeros included).
    pub exit_reasons: BTreeMap<ExitReason, u64>,
    /// Assistant turns per rollout.
    pub turns: Stat,
    /// Tool calls per rollout.
    pub tool_calls: Stat,
    /// Sampled tokens per rollout.
    pub sampled_tokens: Stat,
    /// Response tokens (sampled and inserted) per rollout.
    pub response_tokens: Stat,
    /// Time per phase.
    pub time: PhaseStats,
    /// Wall-clock time of the run, in seconds.
    pub wall_time: f64,
    /// Rollouts finished per second of wall-clock time.
    pub rollouts_per_sec: f64,
}

/// Builds a [`Summary`] one trajectory at a time.
#[derive(Debug, Clone, Default)]
pub struct SummaryBuilder {
    rollouts: u64,
    succeeded: u64,
    rewarded: u64,
    reward_sum: f64,
    masked: u64,
    exits: BTreeMap<ExitReason, u64>,
    turns: Acc,
    tool_calls: Acc,
    sampled: Acc,
    response: Acc,
    phases: [Acc; 6],
}

impl SummaryBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one trajectory.
    pub fn add(&mut self, t: &Trajectory) {
        self.rollouts += 1;
        self.succeeded += u64::from(t.is_success());
        if let Some(r) = &t.reward {
            self.rewarded += 1;
            self.reward_sum += r.score;
        }
        self.masked += u64::from(t.masked);
        *self.exits.entry(t.exit_reason).or_default() += 1;
        self.turns.add(f64::from(t.counts.turns));
        self.tool_calls.add(f64::from(t.counts.tool_calls));
        self.sampled.add(t.counts.sampled_tokens as f64);
        self.response.add(t.output.response_ids.len() as f64);
        for (acc, v) in self.phases.iter_mut().zip(phase_seconds(&t.timings)) {
            acc.add(v);
        }
    }

    /// The summary so far; `wall` is the run's elapsed time.
    pub fn summary(&self, wall: Duration) -> Summary {
        let n = self.rollouts;
        let ratio = |a: u64| if n == 0 { 0.0 } else { a as f64 / n as f64 };
        let mut exit_reasons: BTreeMap<ExitReason, u64> =
            ExitReason::ALL.into_iter().map(|r| (r, 0)).collect();
        for (r, c) in &self.exits {
            exit_reasons.insert(*r, *c);
        }
        let [sandbox_start, model, tools, reward, sandbox_stop, total] =
            self.phases.map(|a| a.stat(n));
        let time = PhaseStats {
            sandbox_start,
            model,
            tools,
            reward,
            sandbox_stop,
            total,
        };
        let wall_time = wall.as_secs_f64();
        Summary {
            rollouts: n,
            succeeded: self.succeeded,
            success_rate: ratio(self.succeeded),
            rewarded: self.rewarded,
            mean_reward: (self.rewarded > 0).then(|| self.reward_sum / self.rewarded as f64),
            masked: self.masked,
            exit_reasons,
            turns: self.turns.stat(n),
            tool_calls: self.tool_calls.stat(n),
            sampled_tokens: self.sampled.stat(n),
            response_tokens: self.response.stat(n),
            time,
            wall_time,
            rollouts_per_sec: if wall_time > 0.0 {
                n as f64 / wall_time
            } else {
                0.0
            },
        }
    }
}

impl Summary {
    /// The summary of a finished set of trajectories.
    pub fn from_trajectories<'a>(
        trajectories: impl IntoIterator<Item = &'a Trajectory>,
        wall: Duration,
    ) -> Self {
        let mut b = SummaryBuilder::new();
        trajectories.into_iter().for_each(|t| b.add(t));
        b.summary(wall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reward::RewardOutcome;

    #[test]
    fn rates_and_means_are_computed_over_the_right_population() {
        let mut a = Trajectory::empty("a", 0, vec![], ExitReason::Finished, None);
        a.reward = Some(RewardOutcome::binary(true));
        a.counts.turns = 3;
        let mut b = Trajectory::empty("b", 0, vec![], ExitReason::MaxTurns, None);
        b.reward = Some(RewardOutcome::binary(false));
        b.counts.turns = 5;
        let c = Trajectory::empty("c", 0, vec![], ExitReason::SandboxError, None);
        let s = Summary::from_trajectories([&a, &b, &c], Duration::from_secs(2));
        assert_eq!((s.rollouts, s.succeeded, s.rewarded), (3, 1, 2));
        assert!((s.success_rate - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.mean_reward, Some(0.5));
        assert_eq!(s.turns.max, 5.0);
        assert!((s.turns.mean - 8.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.exit_reasons[&ExitReason::MaxTurns], 1);
        assert_eq!(s.exit_reasons[&ExitReason::TokenLimit], 0);
        assert_eq!(s.rollouts_per_sec, 1.5);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["exit_reasons"]["sandbox_error"], 1);
    }
}
