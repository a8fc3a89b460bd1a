//! `command`: a generic task in a sandbox (bash + editor + finish) whose reward is a test
//! command run in the sandbox after the loop (its exit code, or a score it prints).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uniagent_core::Task;
use uniagent_rewards::CommandReward;
use uniagent_sandboxes::DeploymentConfig;

use super::{Environment, EnvironmentSettings, RolloutParts, SandboxSettings, TemplatedSandboxes};
use crate::error::Result;

/// Settings of `command`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct CommandSettings {
    /// The reward: `command` (else each task's `reward_command`), `cwd`, `timeout_secs`,
    /// `score` (`exit_code` or `last_line`).
    pub reward: CommandReward,
    /// Offer the file editor besides bash.
    pub editor: bool,
    /// How long one `execute_bash` call may take (seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub bash_timeout: Duration,
    /// The sandbox backend (`{field}` templates in a docker image).
    pub sandbox: DeploymentConfig,
    /// Setup commands run once before the loop (`{field}` substituted).
    pub setup: Vec<String>,
    /// How long each setup command may take (seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub setup_timeout: Duration,
}

impl Default for CommandSettings {
    fn default() -> Self {
        Self {
            reward: CommandReward::default(),
            editor: false,
            bash_timeout: Duration::from_secs(120),
            sandbox: DeploymentConfig::default(),
            setup: Vec::new(),
            setup_timeout: Duration::from_secs(600),
        }
    }
}

/// The `command` environment.
#[derive(Debug, Clone)]
pub struct CommandEnvironment {
    settings: CommandSettings,
}

impl CommandEnvironment {
    /// From the config section.
    pub fn from_settings(s: &EnvironmentSettings<'_>) -> Result<Self> {
        Ok(Self {
            settings: s.decode()?,
        })
    }

    fn sandboxes(&self) -> TemplatedSandboxes {
        let s = &self.settings;
        let settings = SandboxSettings::of(&s.sandbox, &s.setup, s.setup_timeout);
        TemplatedSandboxes::new(settings, None)
    }
}

#[async_trait]
impl Environment for CommandEnvironment {
    fn name(&self) -> &str {
        "command"
    }

    fn check_task(&self, task: &Task) -> std::result::Result<(), String> {
        if self.settings.reward.command.is_none()
            && !task
                .metadata
                .get("reward_command")
                .is_some_and(|v| v.is_string())
        {
            return Err(
                "missing field `reward_command` (or set environment.reward.command)".into(),
            );
        }
        Ok(())
    }

    fn parts(&self) -> Result<RolloutParts> {
        let tools = super::shell_tools(self.settings.bash_timeout, self.settings.editor);
        Ok(RolloutParts {
            tools,
            reward: Some(Arc::new(self.settings.reward.clone())),
            sandboxes: Some(Arc::new(self.sandboxes())),
        })
    }

    async fn preflight(&self, tasks: &[Task]) -> Result<()> {
        self.sandboxes().preflight(tasks).await
    }
}
