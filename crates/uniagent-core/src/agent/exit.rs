//! [`ExitReason`]: how a rollout ended, and [`MaskPolicy`]: which endings are kept out of
//! training.

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

    /// The agent ended the episode itself (finish or submit).
    pub fn is_success_path(self) -> bool {
        matches!(self, Self::Finished | Self::Submitted)
    }

    /// The ending was caused by infrastructure, not by the policy's behaviour.
    pub fn is_infrastructure(self) -> bool {
        matches!(
            self,
            Self::SandboxError
                | Self::ModelError
                | Self::RewardError
                | Self::WallClockTimeout
                | Self::Cancelled
                | Self::InternalError
        )
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

    #[test]
    fn unknown_reason_is_rejected() {
        assert!(serde_json::from_str::<MaskPolicy>(r#"["finishd"]"#).is_err());
    }
}
