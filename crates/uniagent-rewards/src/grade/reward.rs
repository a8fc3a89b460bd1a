//! [`FreshSandboxTests`]: the SWE-bench grading as a training reward.

use std::fmt;
use std::sync::Arc;

use serde_json::{json, Value};
use uniagent_core::runner::SandboxFactory;
use uniagent_core::{RewardContext, RewardOutcome};

use super::extract::extract_patch_excluding;
use super::fresh::{grade_patch, GradeOptions, Verdict};
use super::instance::{task_row, SweInstance, TaskFormat};
use crate::error::RewardError;
use crate::sandbox::sandbox;

/// Scores a SWE-style or R2E-Gym rollout as the SWE-bench harness would: the agent's
/// `git diff` against `base_commit` is taken from its sandbox
/// ([`extract_patch`](super::extract_patch)) and graded in a fresh sandbox from `sandboxes`
/// ([`grade_patch`]). Nothing else the agent did in its sandbox (test edits,
/// git tricks, planted files outside the repository, a dead sandbox) reaches the verdict.
///
/// The task metadata is a dataset row ([`SweInstance::from_json`]; the task id stands in for a
/// missing `instance_id`). Score 1.0 when resolved (FULL), else 0.0; an agent that left no
/// usable repository (deleted `.git`) scores 0. Infrastructure failures (the fresh sandbox
/// does not start, the test patch does not apply, the tests never ran) are errors, not zeros.
///
/// [`TestsReward`](crate::TestsReward) is the cheaper opt-in that runs the tests in the agent's
/// own sandbox; use it only where the agent cannot be adversarial.
#[derive(Clone)]
pub struct FreshSandboxTests {
    sandboxes: Arc<dyn SandboxFactory>,
    /// How the fresh sandbox grades.
    pub options: GradeOptions,
    /// Where the repository is in the agent's sandbox, when not at the task's `repo_dir`.
    pub agent_repo_dir: Option<String>,
    /// The test command run instead of each task's `test_cmd` (SWE-bench layout).
    pub test_cmd: Option<String>,
}

impl fmt::Debug for FreshSandboxTests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreshSandboxTests")
            .field("options", &self.options)
            .field("agent_repo_dir", &self.agent_repo_dir)
            .field("test_cmd", &self.test_cmd)
            .finish_non_exhaustive()
    }
}

impl FreshSandboxTests {
    /// Grades in fresh sandboxes from `sandboxes` (given the task, it must return a sandbox of
    /// the task's image).
    pub fn new(sandboxes: Arc<dyn SandboxFactory>) -> Self {
        Self {
            sandboxes,
            options: GradeOptions::default(),
            agent_repo_dir: None,
            test_cmd: None,
        }
    }

    /// Runs `cmd` instead of each task's `test_cmd`.
    pub fn with_test_cmd(mut self, cmd: impl Into<String>) -> Self {
        self.test_cmd = Some(cmd.into());
        self
    }

    /// Reads the agent's work from `dir` in its sandbox (the fresh sandbox still uses the
    /// task's `repo_dir`).
    pub fn with_agent_repo_dir(mut self, dir: impl Into<String>) -> Self {
        self.agent_repo_dir = Some(dir.into());
        self
    }

    /// Grades with `options`.
    pub fn with_options(mut self, options: GradeOptions) -> Self {
        self.options = options;
        self
    }

    async fn outcome(
        &self,
        ctx: &RewardContext<'_>,
    ) -> std::result::Result<RewardOutcome, RewardError> {
        let mut row = task_row(ctx.task);
        if let Some(cmd) = &self.test_cmd {
            row["test_cmd"] = json!(cmd);
            if let Some(install) = row.get_mut("install_config").and_then(Value::as_object_mut) {
                install.remove("test_cmd");
            }
        }
        let instance = SweInstance::from_json(&row)?;
        let agent = sandbox(ctx)?;
        // R2E-Gym images keep their virtualenv and hidden harness untracked in the repository.
        let exclude: &[&str] = match instance.format {
            TaskFormat::R2eGym { .. } => &[".venv", "r2e_tests", "run_tests.sh", "install.sh"],
            TaskFormat::SweBench => &[],
        };
        let patch = match extract_patch_excluding(
            agent,
            self.agent_repo_dir.as_deref().unwrap_or(&instance.repo_dir),
            &instance.base_commit,
            exclude,
        )
        .await
        {
            Ok(patch) => patch,
            Err(RewardError::SetupFailed { output, .. }) => {
                // The agent's repository no longer yields a diff (its `.git` deleted or broken):
                // only the agent could have done that.
                return Ok(RewardOutcome::binary(false)
                    .with_detail("verdict", json!("patch_unavailable"))
                    .with_detail("message", json!(output)));
            }
            Err(e) => return Err(e),
        };
        let fresh = self.sandboxes.create(ctx.task)?;
        let grade = grade_patch(fresh, &instance, &patch, &self.options).await;
        if grade.verdict == Verdict::Error {
            return Err(RewardError::SetupFailed {
                step: format!("grading in a fresh sandbox ({:?})", grade.error),
                exit_code: None,
                output: grade.message.unwrap_or_default(),
            });
        }
        let mut details = serde_json::to_value(&grade).unwrap_or(Value::Null);
        let outcome = RewardOutcome::binary(grade.verdict == Verdict::Resolved)
            .with_detail("log_tail", json!(crate::error::tail(&grade.log, 4000)));
        Ok(match details.as_object_mut() {
            Some(map) => map
                .iter()
                .fold(outcome, |o, (k, v)| o.with_detail(k, v.clone())),
            None => outcome,
        })
    }
}

crate::spec::forward_reward_spec!(FreshSandboxTests, "swe_fresh_sandbox");
