//! `swe`: a repository at its base commit in a Docker image chosen per task (`{instance_id}`),
//! the bash, editor and submit tools, and the tests reward: SWE-bench's (`FAIL_TO_PASS` must
//! start passing, `PASS_TO_PASS` must keep passing, with the task's `test_patch` applied) or,
//! for R2E-Gym rows (`expected_output_json`), R2E-Gym's (the image's hidden tests must report
//! what the dataset expects). By default only the agent's diff is graded, in a fresh sandbox
//! of the task ([`FreshSandboxTests`]); `grading: in_sandbox` runs the tests in the agent's
//! own sandbox instead (cheaper, and open to tampering).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_core::agent::LoopConfig;
use uniagent_core::Task;
use uniagent_core::{RewardContext, RewardOutcome, RewardSpec};
use uniagent_rewards::grade::{FreshSandboxTests, GradeOptions, R2eInSandbox, SweInstance};
use uniagent_rewards::{LogFormat, TestsReward};
use uniagent_sandboxes::{DeploymentConfig, DockerConfig};
use uniagent_tools::{ExecuteBash, StrReplaceEditor, Submit, ToolboxConfig};

use super::{Environment, EnvironmentSettings, RolloutParts, SandboxSettings, TemplatedSandboxes};
use crate::error::Result;

/// Where `swe` runs the tests that score a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grading {
    /// Only the agent's diff leaves its sandbox; a fresh sandbox of the task applies it and
    /// runs the tests, as the SWE-bench harness does (SWE-bench, SWE-rebench and R2E-Gym rows).
    #[default]
    FreshSandbox,
    /// The tests run in the agent's sandbox, after it finished (R2E-Gym rows: the image's
    /// `run_tests.sh`, as R2E-Gym's runtime does). Cheaper, and only for agents that are not
    /// adversarial: the agent controls that repository.
    InSandbox,
}

/// Settings of `swe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SweSettings {
    /// The sandbox; by default docker with image `{image}` if tasks carry one, written as
    /// `sandbox: {type: docker, image: "sweb.eval.x86_64.{instance_id}"}`.
    pub sandbox: DeploymentConfig,
    /// Setup commands run once before the loop (`{field}` substituted).
    pub setup: Vec<String>,
    /// How long each setup command may take (seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub setup_timeout: Duration,
    /// The repository in the sandbox.
    pub repo_dir: String,
    /// Where the tests that score a rollout run.
    pub grading: Grading,
    /// The test command; `None` reads each task's `test_cmd`.
    pub test_command: Option<String>,
    /// The log format of the test command (`in_sandbox` grading; fresh-sandbox grading reads
    /// each task's `log_parser`, or the `swebench` package's parser for its `repo`).
    pub log_format: LogFormat,
    /// How long the test run may take (past it the task scores 0; seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub test_timeout: Duration,
    /// How long one `execute_bash` call may take (seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub bash_timeout: Duration,
    /// The `uniagent-toolbox` binary the editor uploads (default: found next to the sandbox
    /// server, or `$UNIAGENT_TOOLBOX_BIN`).
    pub toolbox_binary: Option<PathBuf>,
}

impl Default for SweSettings {
    fn default() -> Self {
        Self {
            sandbox: DeploymentConfig::Docker(DockerConfig {
                image: "{image}".into(),
                ..DockerConfig::default()
            }),
            setup: Vec::new(),
            setup_timeout: Duration::from_secs(600),
            repo_dir: "/testbed".into(),
            grading: Grading::FreshSandbox,
            test_command: None,
            log_format: LogFormat::Auto,
            test_timeout: Duration::from_secs(1800),
            bash_timeout: Duration::from_secs(180),
            toolbox_binary: None,
        }
    }
}

/// The `swe` environment.
#[derive(Debug, Clone)]
pub struct Swe {
    settings: SweSettings,
}

impl Swe {
    /// From the config section.
    pub fn from_settings(s: &EnvironmentSettings<'_>) -> Result<Self> {
        Ok(Self::new(s.decode()?))
    }

    /// From settings.
    pub fn new(settings: SweSettings) -> Self {
        Self { settings }
    }

    fn sandboxes(&self) -> TemplatedSandboxes {
        let s = &self.settings;
        let settings = SandboxSettings::of(&s.sandbox, &s.setup, s.setup_timeout);
        TemplatedSandboxes::new(settings, None)
    }
}

/// An R2E-Gym row: it carries `expected_output_json`.
fn is_r2e_gym(metadata: &serde_json::Map<String, Value>) -> bool {
    metadata
        .get("expected_output_json")
        .is_some_and(|v| !v.is_null())
}

/// `grading: in_sandbox`: SWE-bench rows by [`TestsReward`], R2E-Gym rows by [`R2eInSandbox`].
#[derive(Debug)]
struct InSandbox {
    swe_bench: TestsReward,
    r2e_gym: R2eInSandbox,
}

#[async_trait]
impl RewardSpec for InSandbox {
    fn name(&self) -> &str {
        "swe_in_sandbox"
    }

    async fn score(&self, ctx: &RewardContext<'_>) -> uniagent_core::Result<RewardOutcome> {
        if is_r2e_gym(&ctx.task.metadata) {
            self.r2e_gym.score(ctx).await
        } else {
            self.swe_bench.score(ctx).await
        }
    }
}

fn is_test_list(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(items)) => items.iter().all(Value::is_string),
        _ => false,
    }
}

#[async_trait]
impl Environment for Swe {
    fn name(&self) -> &str {
        "swe"
    }

    fn check_task(&self, task: &Task) -> std::result::Result<(), String> {
        let m = &task.metadata;
        if is_r2e_gym(m) {
            let mut row = Value::Object(m.clone());
            if row.get("instance_id").is_none() {
                row["instance_id"] = Value::String(task.id.clone());
            }
            return SweInstance::from_json(&row)
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        for key in ["FAIL_TO_PASS", "PASS_TO_PASS"] {
            if !is_test_list(m.get(key)) {
                return Err(format!(
                    "field `{key}` must be a list of test ids (use the swe-bench layout)"
                ));
            }
        }
        if m.get("test_patch").is_some_and(Value::is_string)
            && !m.get("base_commit").is_some_and(Value::is_string)
        {
            return Err("missing field `base_commit` (needed to apply `test_patch`)".into());
        }
        // Fresh-sandbox grading finds the command of a known (repo, version) in the harness's
        // spec table.
        let in_spec_table = self.settings.grading == Grading::FreshSandbox
            && match (m.get("repo"), m.get("version")) {
                (Some(Value::String(repo)), Some(Value::String(version))) => {
                    uniagent_rewards::swebench::specs::spec(repo, version).is_some()
                }
                _ => false,
            };
        if self.settings.test_command.is_none()
            && !m.get("test_cmd").is_some_and(Value::is_string)
            && !in_spec_table
        {
            return Err("missing field `test_cmd` (or set environment.test_command)".into());
        }
        Ok(())
    }

    fn configure_loop(&self, config: &mut LoopConfig) {
        // The tests run inside the reward: give it at least the test timeout plus a margin (and,
        // grading in a fresh sandbox, time to start it and apply the patches).
        let start = match self.settings.grading {
            Grading::FreshSandbox => Duration::from_secs(300),
            Grading::InSandbox => Duration::ZERO,
        };
        let need = self.settings.test_timeout.max(Duration::from_secs(1))
            + Duration::from_secs(120)
            + start;
        if config.reward_timeout.is_some_and(|t| t < need) {
            config.reward_timeout = Some(need);
        }
    }

    fn parts(&self) -> Result<RolloutParts> {
        let toolbox = ToolboxConfig {
            binary: self.settings.toolbox_binary.clone(),
            ..ToolboxConfig::default()
        };
        let reward: Arc<dyn RewardSpec> = match self.settings.grading {
            Grading::InSandbox => Arc::new(InSandbox {
                swe_bench: TestsReward {
                    test_command: self.settings.test_command.clone(),
                    repo_dir: Some(self.settings.repo_dir.clone()),
                    log_format: self.settings.log_format,
                    timeout: self.settings.test_timeout,
                    ..TestsReward::default()
                },
                r2e_gym: R2eInSandbox {
                    timeout: self.settings.test_timeout,
                    ..R2eInSandbox::default()
                },
            }),
            Grading::FreshSandbox => {
                let mut fresh = FreshSandboxTests::new(Arc::new(self.sandboxes()))
                    .with_agent_repo_dir(self.settings.repo_dir.clone())
                    .with_options(GradeOptions {
                        test_timeout: self.settings.test_timeout,
                        ..GradeOptions::default()
                    });
                if let Some(cmd) = &self.settings.test_command {
                    fresh = fresh.with_test_cmd(cmd.clone());
                }
                Arc::new(fresh)
            }
        };
        Ok(RolloutParts {
            tools: vec![
                Arc::new(ExecuteBash {
                    timeout: self.settings.bash_timeout,
                    ..ExecuteBash::default()
                }),
                Arc::new(StrReplaceEditor::new(toolbox)),
                Arc::new(Submit {
                    repo_dir: Some(self.settings.repo_dir.clone()),
                    ..Submit::default()
                }),
            ],
            reward: Some(reward),
            sandboxes: Some(Arc::new(self.sandboxes())),
        })
    }

    async fn preflight(&self, tasks: &[Task]) -> Result<()> {
        if let Some(binary) = &self.settings.toolbox_binary {
            uniagent_tools::find_toolbox_binary(Some(binary)).map_err(|e| {
                crate::error::EnvError::preflight(format!("environment.toolbox_binary: {e}"))
            })?;
        }
        self.sandboxes().preflight(tasks).await
    }
}
