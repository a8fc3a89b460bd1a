//! [`HarnessConfig`]: how a harness is launched per session and where its reward comes from.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::duration_secs;

use crate::error::{GatewayError, Result};

/// Where a session's reward comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HarnessReward {
    /// The harness posts it to `$UNIAGENT_GATEWAY/reward` (the harness knows the outcome).
    #[default]
    Route,
    /// This command (argv) runs after the harness exits, in the same directory and
    /// environment, and prints the reward on its last non-empty stdout line: a JSON object
    /// as the `reward` route takes (`{"score": 1.0, "success": true}`) or a bare number.
    Command(Vec<String>),
}

/// A harness run once per task × sample, each run against its own gateway session.
///
/// The command gets, besides the parent's environment and `env`:
/// `OPENAI_BASE_URL` (`http://127.0.0.1:<port>/sessions/<id>/v1`), `ANTHROPIC_BASE_URL`
/// (`.../sessions/<id>`), `OPENAI_API_KEY` and `ANTHROPIC_API_KEY` (a placeholder, the SDKs
/// want one), `UNIAGENT_GATEWAY` (`.../sessions/<id>`), `UNIAGENT_SESSION` (`<task id>:<sample>`),
/// `UNIAGENT_MODEL` (the model name to ask for), `UNIAGENT_TASK` (a file holding the task as
/// JSON: `id`, `messages`, `metadata`) and `UNIAGENT_WORKDIR` (a fresh directory of the session,
/// removed afterwards; also the working directory unless `cwd` is set).
///
/// ```
/// use uniagent_gateway::harness::{HarnessConfig, HarnessReward};
/// let c: HarnessConfig = serde_json::from_value(serde_json::json!({
///     "command": ["python3", "agent.py"],
///     "timeout": 120,
///     "reward": {"command": ["python3", "grade.py"]},
/// })).unwrap();
/// assert_eq!(c.timeout.as_secs(), 120);
/// assert_eq!(c.reward, HarnessReward::Command(vec!["python3".into(), "grade.py".into()]));
/// assert!(c.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarnessConfig {
    /// The harness's argv (the program and its arguments; no shell).
    pub command: Vec<String>,
    /// Working directory (default: the session's fresh `UNIAGENT_WORKDIR`).
    pub cwd: Option<PathBuf>,
    /// Extra environment variables (they override the ones above).
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit of one session (seconds in configs); on expiry the harness's process
    /// group is killed and its chains end with `wall_clock_timeout`. The reward command has
    /// the same limit.
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    /// Where the reward comes from.
    pub reward: HarnessReward,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            cwd: None,
            env: BTreeMap::new(),
            timeout: Duration::from_secs(600),
            reward: HarnessReward::Route,
        }
    }
}

impl HarnessConfig {
    /// Checks what serde cannot: a program to run, a positive timeout.
    pub fn validate(&self) -> Result<()> {
        if self.command.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(GatewayError::invalid(
                "harness: `command` must name a program (argv, e.g. [python3, agent.py])",
            ));
        }
        if let HarnessReward::Command(argv) = &self.reward {
            if argv.first().is_none_or(|p| p.trim().is_empty()) {
                return Err(GatewayError::invalid(
                    "harness: `reward.command` must name a program",
                ));
            }
        }
        if self.timeout.is_zero() {
            return Err(GatewayError::invalid("harness: `timeout` must be positive"));
        }
        Ok(())
    }
}
