//! [`LoopConfig`]: limits, budgets and policies of the interaction loop.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::exit::MaskPolicy;
use crate::error::{Error, Result};
use crate::retry::{duration_secs, opt_duration_secs};
use crate::rollout::LengthLimits;
use crate::sampling::SamplingParams;

/// Configuration of [`AgentInteraction`](super::AgentInteraction). Every field has a default;
/// unknown keys are rejected so that typos fail loudly.
///
/// Budgets count events and end the episode when the count **reaches** the budget: with
/// `tool_timeout_budget: 4`, the fourth timed-out call ends it (Uni-Agent's `timeout_budget: 3`).
///
/// ```
/// use uniagent_core::agent::LoopConfig;
/// use uniagent_core::config::{parse, ConfigFormat};
///
/// let cfg: LoopConfig = parse(
///     "max_turns: 30\ntool_timeout: 120\nlimits:\n  max_model_len: 32768\n",
///     ConfigFormat::Yaml,
/// ).unwrap();
/// assert_eq!(cfg.max_turns, 30);
/// assert_eq!(cfg.limits.max_model_len, Some(32768));
/// assert!(cfg.validate().is_ok());
/// assert!(parse::<LoopConfig>("max_turn: 3", ConfigFormat::Yaml).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    /// Assistant turns allowed. A finish or submit on the last allowed turn counts as such.
    pub max_turns: u32,
    /// Token limits (prompt, response, context window) applied on top of the model's own.
    /// They bind token-level backends; API backends only get `sampling.max_tokens`.
    pub limits: LengthLimits,
    /// Sampling parameters of every turn.
    pub sampling: SamplingParams,
    /// Time one tool call may take; the tool receives it in its context.
    #[serde(with = "duration_secs")]
    pub tool_timeout: Duration,
    /// Extra time the loop waits for a tool beyond `tool_timeout` before giving up on it. This
    /// keeps the tool's own timeout strictly shorter than the deadline of the transport that
    /// carries it; a call cut by this guard still counts as a timeout, not a crash.
    #[serde(with = "duration_secs")]
    pub tool_transport_margin: Duration,
    /// Timed-out tool calls that end the episode.
    pub tool_timeout_budget: u32,
    /// Turns with a malformed or missing tool call that end the episode.
    pub format_error_budget: u32,
    /// Wall-clock time of the loop (model and tools; not the reward). `None`: unlimited.
    #[serde(with = "opt_duration_secs")]
    pub wall_clock_budget: Option<Duration>,
    /// Time the reward may take. `None`: unlimited.
    #[serde(with = "opt_duration_secs")]
    pub reward_timeout: Option<Duration>,
    /// Which endings exclude the trajectory from training.
    pub mask: MaskPolicy,
    /// When a turn is cut by the token budget, set its sampled tokens' mask to 0 (its tool call
    /// never ran, its end-of-turn token is missing).
    pub mask_truncated_turn: bool,
    /// A reply without a tool call finishes the episode (chat agents) instead of being a
    /// format error.
    pub chat_mode: bool,
    /// Bash session the tools use.
    pub session: String,
    /// Create `session` in the sandbox before the first turn.
    pub create_session: bool,
    /// Observations longer than this many characters are clipped with a note.
    pub max_observation_chars: usize,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            max_turns: 50,
            limits: LengthLimits::default(),
            sampling: SamplingParams::default(),
            tool_timeout: Duration::from_secs(60),
            tool_transport_margin: Duration::from_secs(10),
            tool_timeout_budget: 4,
            format_error_budget: 8,
            wall_clock_budget: Some(Duration::from_secs(3600)),
            reward_timeout: Some(Duration::from_secs(600)),
            mask: MaskPolicy::default(),
            mask_truncated_turn: true,
            chat_mode: false,
            session: "default".to_owned(),
            create_session: true,
            max_observation_chars: 100_000,
        }
    }
}

impl LoopConfig {
    /// Checks ranges; the message names the bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| {
            Err(Error::Config {
                message,
                source: None,
            })
        };
        if self.max_turns == 0 {
            return bad("loop.max_turns must be >= 1".into());
        }
        if self.tool_timeout.is_zero() {
            return bad("loop.tool_timeout must be > 0".into());
        }
        if self.tool_transport_margin.is_zero() {
            return bad(
                "loop.tool_transport_margin must be > 0: the transport deadline must exceed the tool timeout".into()
            );
        }
        if self.tool_timeout_budget == 0 {
            return bad("loop.tool_timeout_budget must be >= 1".into());
        }
        if self.format_error_budget == 0 {
            return bad("loop.format_error_budget must be >= 1".into());
        }
        if self.wall_clock_budget.is_some_and(|d| d.is_zero()) {
            return bad("loop.wall_clock_budget must be > 0 (or null for none)".into());
        }
        if self.session.is_empty() {
            return bad("loop.session must not be empty".into());
        }
        if self.max_observation_chars == 0 {
            return bad("loop.max_observation_chars must be >= 1".into());
        }
        self.sampling.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, to_string, ConfigFormat};

    #[test]
    fn round_trips_and_defaults_validate() {
        let cfg = LoopConfig {
            max_turns: 7,
            chat_mode: true,
            ..LoopConfig::default()
        };
        cfg.validate().unwrap();
        for f in [ConfigFormat::Yaml, ConfigFormat::Json, ConfigFormat::Toml] {
            let back: LoopConfig = parse(&to_string(&cfg, f).unwrap(), f).unwrap();
            assert_eq!(back, cfg);
        }
    }

    #[test]
    fn zero_margin_is_rejected() {
        let cfg = LoopConfig {
            tool_transport_margin: Duration::ZERO,
            ..LoopConfig::default()
        };
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("tool_transport_margin"));
    }
}
