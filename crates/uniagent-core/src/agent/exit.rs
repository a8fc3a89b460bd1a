//! [`ExitReason`]: how a rollout ended, [`ExitClass`]: whose doing the ending was, and
//! [`MaskPolicy`]: which endings are kept out of training.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Every way a rollout can end. Closed: summaries count each variant, and a new ending is a
/// deliberate change here.
///
/// ```
/// use uniagent_core::agent::ExitReason;
/// assert_eq!(ExitReason::ToolTimeoutBudget.as_str(), "tool_timeout_budget");
/// let r: ExitReason = serde_json::from_str("\"max_turns\"").unwrap();
/// assert_eq!(r, ExitReason::MaxTurns);
/// assert!(!ExitReason::MaxTurns.is_success_path());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The agent called a finish tool (an answer), or answered in plain text in chat mode.
    Finished,
    /// The agent called a submit tool (its work is the answer).
    Submitted,
    /// The turn limit was reached before the agent finished.
    MaxTurns,
    /// The response-token budget (`max_response_len`) ran out.
    TokenLimit,
    /// The context window (`max_model_len`, or the prompt limit) was exceeded.
    ContextOverflow,
    /// Too many turns with malformed tool calls.
    FormatErrorBudget,
    /// Too many tool calls timed out.
    ToolTimeoutBudget,
    /// The sandbox failed (start, session, or a tool's infrastructure error).
    SandboxError,
    /// The model backend failed.
    ModelError,
    /// The reward could not be computed.
    RewardError,
    /// The rollout's wall-clock budget ran out.
    WallClockTimeout,
    /// The run was cancelled (Ctrl-C, batch abort).
    Cancelled,
    /// A bug: the rollout panicked or hit an internal error. Isolated by the runner.
    InternalError,
}

impl ExitReason {
    /// Every variant, in declaration order.
    pub const ALL: [ExitReason; 13] = [
        Self::Finished,
        Self::Submitted,
        Self::MaxTurns,
        Self::TokenLimit,
        Self::ContextOverflow,
        Self::FormatErrorBudget,
        Self::ToolTimeoutBudget,
        Self::SandboxError,
        Self::ModelError,
        Self::RewardError,
        Self::WallClockTimeout,
        Self::Cancelled,
        Self::InternalError,
    ];

    /// The snake_case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::Submitted => "submitted",
            Self::MaxTurns => "max_turns",
            Self::TokenLimit => "token_limit",
            Self::ContextOverflow => "context_overflow",
            Self::FormatErrorBudget => "format_error_budget",
            Self::ToolTimeoutBudget => "tool_timeout_budget",
            Self::SandboxError => "sandbox_error",
            Self::ModelError => "model_error",
            Self::RewardError => "reward_error",
            Self::WallClockTimeout => "wall_clock_timeout",
            Self::Cancelled => "cancelled",
            Self::InternalError => "internal_error",
        }
    }

    /// Whose doing the ending was: the agent's own (finish, submit), a limit the policy ran
    /// into (turns, tokens, context, malformed or timed-out tool calls), or the
    /// infrastructure around it (sandbox, model backend, reward, wall clock, cancellation,
    /// a bug). The one place this is decided: reports count unsolved rollouts as policy or
    /// infrastructure failures by it, and [`MaskPolicy::default`] masks the infrastructure
    /// endings.
    ///
    /// ```
    /// use uniagent_core::agent::{ExitClass, ExitReason};
    /// assert_eq!(ExitReason::Submitted.class(), ExitClass::Agent);
    /// assert_eq!(ExitReason::ContextOverflow.class(), ExitClass::Policy);
    /// assert_eq!(ExitReason::ModelError.class(), ExitClass::Infrastructure);
    /// ```
    pub fn class(self) -> ExitClass {
        match self {
            Self::Finished | Self::Submitted => ExitClass::Agent,
            Self::MaxTurns
            | Self::TokenLimit
            | Self::ContextOverflow
            | Self::FormatErrorBudget
            | Self::ToolTimeoutBudget => ExitClass::Policy,
            Self::SandboxError
            | Self::ModelError
            | Self::RewardError
            | Self::WallClockTimeout
            | Self::Cancelled
            | Self::InternalError => ExitClass::Infrastructure,
        }
    }

    /// The agent ended the episode itself (finish or submit): [`ExitClass::Agent`].
    pub fn is_success_path(self) -> bool {
        self.class() == ExitClass::Agent
    }

    /// The ending was caused by infrastructure, not by the policy's behaviour:
    /// [`ExitClass::Infrastructure`].
    pub fn is_infrastructure(self) -> bool {
        self.class() == ExitClass::Infrastructure
    }

    /// Whether the sandbox is still usable for scoring after this ending.
    pub(crate) fn allows_reward(self) -> bool {
        !matches!(
            self,
            Self::SandboxError | Self::Cancelled | Self::InternalError
        )
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whose doing an ending was ([`ExitReason::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitClass {
    /// The agent ended the episode itself (finish or submit); whether it solved the task is
    /// the reward's call, and an unsolved one is the policy's failure.
    Agent,
    /// The policy ran into a limit: turns, response tokens, the context window, too many
    /// malformed or timed-out tool calls. A failure of the policy.
    Policy,
    /// The environment failed the policy: sandbox, model backend, reward, the wall clock, a
    /// cancellation, an internal error. Not the policy's fault.
    Infrastructure,
}

impl ExitClass {
    /// The snake_case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Policy => "policy",
            Self::Infrastructure => "infrastructure",
        }
    }
}

/// Which exit reasons exclude a trajectory from training (all of its mask set to 0). Masked
/// trajectories are still written and counted.
///
/// The default masks the endings caused by infrastructure ([`ExitReason::is_infrastructure`]):
/// the policy should neither be rewarded nor punished for a crashed sandbox. Endings caused by
/// the policy (max turns, budgets, token limits) stay trainable so that it learns to avoid them.
///
/// ```
/// use uniagent_core::agent::{ExitReason, MaskPolicy};
/// let p = MaskPolicy::default();
/// assert!(p.masks(ExitReason::SandboxError));
/// assert!(!p.masks(ExitReason::MaxTurns));
/// // Uni-Agent's `mask_abnormal_exit_traj: true`: everything but a clean finish.
/// let strict = MaskPolicy::all_but(&[ExitReason::Finished, ExitReason::Submitted]);
/// assert!(strict.masks(ExitReason::MaxTurns));
/// let p: MaskPolicy = serde_json::from_str(r#"["token_limit"]"#).unwrap();
/// assert!(p.masks(ExitReason::TokenLimit) && !p.masks(ExitReason::ModelError));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MaskPolicy {
    masked: BTreeSet<ExitReason>,
}

impl Default for MaskPolicy {
    fn default() -> Self {
        Self {
            masked: ExitReason::ALL
                .into_iter()
                .filter(|r| r.is_infrastructure())
                .collect(),
        }
    }
}

impl MaskPolicy {
    /// Masks exactly the given reasons.
    pub fn only(reasons: &[ExitReason]) -> Self {
        Self {
            masked: reasons.iter().copied().collect(),
        }
    }

    /// Masks every reason except the given ones.
    pub fn all_but(kept: &[ExitReason]) -> Self {
        Self {
            masked: ExitReason::ALL
                .into_iter()
                .filter(|r| !kept.contains(r))
                .collect(),
        }
    }

    /// Masks nothing.
    pub fn none() -> Self {
        Self {
            masked: BTreeSet::new(),
        }
    }

    /// Whether a trajectory ending with `reason` is masked out of training.
    pub fn masks(&self, reason: ExitReason) -> bool {
        self.masked.contains(&reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde() {
        for r in ExitReason::ALL {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<ExitReason>(&json).unwrap(), r);
        }
    }

    /// Every variant, written out with no wildcard: a new variant does not compile here until
    /// its class is decided, and `ALL` must list it too.
    #[test]
    fn every_reason_has_its_class() {
        let expected = |r: ExitReason| match r {
            ExitReason::Finished | ExitReason::Submitted => ExitClass::Agent,
            ExitReason::MaxTurns => ExitClass::Policy,
            ExitReason::TokenLimit => ExitClass::Policy,
            ExitReason::ContextOverflow => ExitClass::Policy,
            ExitReason::FormatErrorBudget => ExitClass::Policy,
            ExitReason::ToolTimeoutBudget => ExitClass::Policy,
            ExitReason::SandboxError => ExitClass::Infrastructure,
            ExitReason::ModelError => ExitClass::Infrastructure,
            ExitReason::RewardError => ExitClass::Infrastructure,
            ExitReason::WallClockTimeout => ExitClass::Infrastructure,
            ExitReason::Cancelled => ExitClass::Infrastructure,
            ExitReason::InternalError => ExitClass::Infrastructure,
        };
        let distinct: BTreeSet<ExitReason> = ExitReason::ALL.into_iter().collect();
        assert_eq!(
            distinct.len(),
            ExitReason::ALL.len(),
            "ALL lists a reason twice"
        );
        let mut per_class = std::collections::BTreeMap::new();
        for r in ExitReason::ALL {
            assert_eq!(r.class(), expected(r), "{r}");
            assert_eq!(
                r.is_infrastructure(),
                r.class() == ExitClass::Infrastructure
            );
            assert_eq!(r.is_success_path(), r.class() == ExitClass::Agent);
            *per_class.entry(r.class()).or_insert(0) += 1;
        }
        assert_eq!(per_class[&ExitClass::Agent], 2);
        assert_eq!(per_class[&ExitClass::Policy], 5);
        assert_eq!(per_class[&ExitClass::Infrastructure], 6);
        for c in [
            ExitClass::Agent,
            ExitClass::Policy,
            ExitClass::Infrastructure,
        ] {
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.as_str())
            );
        }
    }

    #[test]
    fn unknown_reason_is_rejected() {
        assert!(serde_json::from_str::<MaskPolicy>(r#"["finishd"]"#).is_err());
    }
}
