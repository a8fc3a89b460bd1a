//! [`Trajectory`]: the record one rollout produces.

use serde::{Deserialize, Serialize};

use super::exit::ExitReason;
use crate::message::Message;
use crate::reward::RewardOutcome;
use crate::rollout::AgentLoopOutput;
use crate::tool::EpisodeSignal;

/// Seconds spent in each phase of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PhaseTimings {
    /// Creating and starting the sandbox, and its bash session.
    pub sandbox_start: f64,
    /// Model calls (including waiting for a model-call permit).
    pub model: f64,
    /// Tool calls.
    pub tools: f64,
    /// Computing the reward.
    pub reward: f64,
    /// Stopping the sandbox.
    pub sandbox_stop: f64,
    /// The whole rollout, from the runner picking it up to the sandbox being stopped.
    pub total: f64,
}

/// Counts of what happened in a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct EpisodeCounts {
    /// Assistant turns sampled.
    pub turns: u32,
    /// Tool calls executed (malformed and skipped calls excluded).
    pub tool_calls: u32,
    /// Tool calls that timed out.
    pub tool_timeouts: u32,
    /// Turns with a malformed or missing tool call.
    pub format_errors: u32,
    /// Tokens sampled by the model (0 when the backend does not report them).
    pub sampled_tokens: u64,
}

/// Everything one rollout produced: the verl-compatible token record (flattened, so one JSONL
/// line holds `prompt_ids`, `response_ids`, `response_mask`, `response_logprobs`,
/// `reward_score`, `num_turns`, `metrics` and `extra_fields` at the top level), how it ended,
/// its reward, the conversation and the time spent per phase.
///
/// `extra_fields` carries `traj_exit_reason` and `traj_masked` as Uni-Agent writes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Rollout id: `<task id>:<sample index>`; also the sticky-routing key of the model.
    pub id: String,
    /// The task's id.
    pub task_id: String,
    /// Sample index within the task (0-based).
    pub sample: u32,
    /// How it ended.
    pub exit_reason: ExitReason,
    /// Excluded from training (mask all 0) by the mask policy, or because nothing was sampled.
    pub masked: bool,
    /// The error behind an abnormal ending, for operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The reward, when one is configured and could be computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<RewardOutcome>,
    /// The finish/submit signal, if the agent sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<EpisodeSignal>,
    /// Counts.
    pub counts: EpisodeCounts,
    /// Time per phase.
    pub timings: PhaseTimings,
    /// verl's record: token fields, reward score, turns, metrics, extra fields.
    #[serde(flatten)]
    pub output: AgentLoopOutput,
    /// The whole conversation, including observations of the last turn that were not appended
    /// to the token trace because the episode ended.
    pub messages: Vec<Message>,
}

/// What training does with one trajectory: the one place that decides it (see
/// [`Trajectory::training_use`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "use")]
pub enum TrainingUse {
    /// In the batch and in its group's baseline, with this reward (0 for failures the agent
    /// could have caused, whatever the reward said).
    Train {
        /// The reward trained on.
        reward: f64,
    },
    /// Out of the batch *and* out of its group's baseline: infrastructure failed and the
    /// policy had no part in it.
    Drop,
}

impl Trajectory {
    /// The training policy, decided here once for every trainer:
    ///
    /// - **Dropped** ([`TrainingUse::Drop`]): endings the policy cannot cause — the model
    ///   backend failed, the run was cancelled, an internal error — and a sandbox that failed
    ///   before the agent executed any tool call (it never started properly). They leave the
    ///   batch and their group's baseline, so they neither reward nor punish anyone.
    /// - **Reward-0 failures**: every other abnormal ending, including the infrastructure-
    ///   looking ones the agent can cause itself — its sandbox dying after it ran commands
    ///   (out-of-memory kill, killing the sandbox server), a reward that cannot be computed
    ///   (the repository broken so the reward cannot set up), the wall-clock budget — train
    ///   with reward 0. Dropping them would teach the policy to crash its sandbox to escape a
    ///   bad score.
    /// - Normal endings train with their reward (0 when none was computed).
    ///
    /// Whether the tokens carry gradient is the mask's business (the loop's `MaskPolicy`); a
    /// masked reward-0 failure still counts in its group's baseline.
    ///
    /// ```
    /// use uniagent_core::agent::{ExitReason, Trajectory, TrainingUse};
    /// use uniagent_core::Message;
    /// let mut t = Trajectory::empty("t", 0, vec![Message::user("hi")], ExitReason::ModelError, None);
    /// assert_eq!(t.training_use(), TrainingUse::Drop);
    /// t.exit_reason = ExitReason::SandboxError;
    /// assert_eq!(t.training_use(), TrainingUse::Drop); // failed before the agent acted
    /// t.counts.tool_calls = 2;
    /// assert_eq!(t.training_use(), TrainingUse::Train { reward: 0.0 }); // the agent may have killed it
    /// ```
    pub fn training_use(&self) -> TrainingUse {
        let acted = self.counts.tool_calls > 0;
        match self.exit_reason {
            ExitReason::ModelError | ExitReason::Cancelled | ExitReason::InternalError => {
                TrainingUse::Drop
            }
            ExitReason::SandboxError if !acted => TrainingUse::Drop,
            ExitReason::SandboxError | ExitReason::RewardError | ExitReason::WallClockTimeout => {
                TrainingUse::Train { reward: 0.0 }
            }
            _ => TrainingUse::Train {
                reward: self.output.reward_score.unwrap_or(0.0),
            },
        }
    }

    /// Whether the task counts as solved (the reward says so).
    pub fn is_success(&self) -> bool {
        self.reward.as_ref().is_some_and(|r| r.success)
    }

    /// Sets how the rollout ended, keeping `extra_fields` in step.
    pub fn set_exit(&mut self, reason: ExitReason, masked: bool) {
        self.exit_reason = reason;
        self.masked = masked;
        if masked {
            self.output.response_mask.iter_mut().for_each(|m| *m = 0);
            if let Some(lps) = &mut self.output.response_logprobs {
                lps.iter_mut().for_each(|lp| *lp = 0.0);
            }
            if let Some(versions) = &mut self.output.weight_versions {
                versions.iter_mut().for_each(|v| *v = None);
            }
        }
        self.output
            .extra_fields
            .insert("traj_exit_reason".into(), reason.as_str().into());
        self.output
            .extra_fields
            .insert("traj_masked".into(), u8::from(masked).into());
    }

    /// A record for a rollout that never ran its loop (cancelled before it started, or its
    /// sandbox could not be created): no tokens, masked.
    pub fn empty(
        task_id: &str,
        sample: u32,
        messages: Vec<Message>,
        reason: ExitReason,
        error: Option<String>,
    ) -> Self {
        let cache = crate::rollout::RolloutCache::messages_only(
            rollout_id(task_id, sample),
            messages,
            Vec::new(),
        );
        let mut t = Self {
            id: rollout_id(task_id, sample),
            task_id: task_id.to_owned(),
            sample,
            exit_reason: reason,
            masked: true,
            error,
            reward: None,
            signal: None,
            counts: EpisodeCounts::default(),
            timings: PhaseTimings::default(),
            output: cache.to_agent_loop_output(),
            messages: cache.messages().to_vec(),
        };
        t.set_exit(reason, true);
        t
    }
}

/// The id of sample `sample` of task `task_id`.
pub fn rollout_id(task_id: &str, sample: u32) -> String {
    format!("{task_id}:{sample}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verl_fields_are_top_level_and_round_trip() {
        let t = Trajectory::empty(
            "t",
            2,
            vec![Message::user("hi")],
            ExitReason::Cancelled,
            None,
        );
        let v = serde_json::to_value(&t).unwrap();
        for key in [
            "prompt_ids",
            "response_ids",
            "response_mask",
            "num_turns",
            "metrics",
            "extra_fields",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["extra_fields"]["traj_exit_reason"], "cancelled");
        assert_eq!(v["extra_fields"]["traj_masked"], 1);
        assert_eq!(v["id"], "t:2");
        let back: Trajectory = serde_json::from_value(v).unwrap();
        assert_eq!(back, t);
    }
}
