//! [`CommandReward`]: the task is solved when a command in the sandbox says so.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use uniagent_core::{RewardContext, RewardOutcome};

use crate::error::{tail, RewardError};
use crate::sandbox::{run, sandbox, timed_out, Run};

/// How the command's result becomes a score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandScore {
    /// 1.0 on exit code 0, else 0.0.
    #[default]
    ExitCode,
    /// The last non-empty line of the output is the score, a number in `[0, 1]`; success is a
    /// score of 1.0. A command that exits non-zero or prints no number scores 0.
    LastLine,
}

/// Runs a command in the still-open sandbox and scores by its exit code or its printed score.
///
/// The command comes from [`CommandReward::command`], else from the task metadata field
/// `reward_command`. It runs with a timeout; running past it scores 0 (the agent's work hangs),
/// it is not an error. Details hold the exit code and the output's tail.
///
/// ```
/// use uniagent_rewards::command::{CommandReward, CommandScore};
/// let reward = CommandReward::new("python3 check.py").scored_by(CommandScore::LastLine);
/// assert_eq!(reward.timeout, std::time::Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CommandReward {
    /// The shell command; `None` reads it from the task's `reward_command`.
    pub command: Option<String>,
    /// Directory the command runs in (default: the sandbox's working directory).
    pub cwd: Option<String>,
    /// Seconds before the command is interrupted (and the episode scores 0). Must be positive and at most a
    /// week; other values are refused when the config is loaded.
    #[serde(rename = "timeout_secs", with = "crate::config::timeout_secs")]
    pub timeout: Duration,
    /// How the result becomes a score.
    pub score: CommandScore,
    /// Bytes of output kept in the details.
    pub output_tail_bytes: usize,
}

impl Default for CommandReward {
    fn default() -> Self {
        Self {
            command: None,
            cwd: None,
            timeout: Duration::from_secs(60),
            score: CommandScore::ExitCode,
            output_tail_bytes: 2000,
        }
    }
}

impl CommandReward {
    /// Runs `command`, scored by its exit code.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: Some(command.into()),
            ..Self::default()
        }
    }

    /// Reads the command from each task's `reward_command` metadata.
    pub fn from_task_metadata() -> Self {
        Self::default()
    }

    /// Scores with `score` instead of the exit code.
    pub fn scored_by(mut self, score: CommandScore) -> Self {
        self.score = score;
        self
    }

    /// Runs the command in `cwd`.
    pub fn in_dir(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Interrupts the command after `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn resolve_command<'a>(
        &'a self,
        ctx: &'a RewardContext<'_>,
    ) -> std::result::Result<&'a str, RewardError> {
        if let Some(command) = &self.command {
            return Ok(command);
        }
        match ctx.task.metadata.get("reward_command") {
            Some(serde_json::Value::String(command)) => Ok(command),
            Some(_) => Err(RewardError::BadMetadata {
                field: "reward_command".into(),
                message: "must be a string".into(),
            }),
            None => Err(RewardError::MissingMetadata {
                field: "reward_command".into(),
            }),
        }
    }

    async fn outcome(
        &self,
        ctx: &RewardContext<'_>,
    ) -> std::result::Result<RewardOutcome, RewardError> {
        let command = self.resolve_command(ctx)?;
        let deployment = sandbox(ctx)?;
        let response = match run(deployment, command, self.cwd.as_deref(), self.timeout).await? {
            Run::TimedOut => return Ok(timed_out(self.timeout)),
            Run::Finished(response) => response,
        };
        let passed = response.exit_code == Some(0);
        let score = match self.score {
            CommandScore::ExitCode => f64::from(u8::from(passed)),
            CommandScore::LastLine if passed => last_line_score(&response.stdout).unwrap_or(0.0),
            CommandScore::LastLine => 0.0,
        };
        Ok(RewardOutcome {
            score,
            success: score >= 1.0,
            details: Default::default(),
        }
        .with_detail("exit_code", json!(response.exit_code))
        .with_detail(
            "output",
            json!(tail(&response.stdout, self.output_tail_bytes)),
        ))
    }
}

/// The last non-empty line as a score in `[0, 1]`, if it is one.
fn last_line_score(output: &str) -> Option<f64> {
    let line = output.lines().rev().find(|l| !l.trim().is_empty())?;
    let value: f64 = line.trim().parse().ok()?;
    (0.0..=1.0).contains(&value).then_some(value)
}

crate::spec::forward_reward_spec!(CommandReward, "command");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_must_be_a_score_in_range() {
        assert_eq!(last_line_score("log\n0.25\n\n"), Some(0.25));
        assert_eq!(last_line_score("1"), Some(1.0));
        assert_eq!(last_line_score("0.5\ndone"), None);
        assert_eq!(last_line_score("1.5"), None);
        assert_eq!(last_line_score("-0.1"), None);
        assert_eq!(last_line_score("NaN"), None);
        assert_eq!(last_line_score(""), None);
    }
}
