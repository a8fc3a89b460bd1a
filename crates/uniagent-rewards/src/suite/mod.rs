//! [`TestsReward`]: SWE-bench-family scoring — run the task's tests in the sandbox and check
//! that the tests that must start passing do, and the ones that passed still do.

mod log;
mod patch;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uniagent_core::{DeploymentExt, RewardContext, RewardOutcome};

pub use log::{parse_test_log, LogFormat, TestStatus};
pub use patch::patch_paths;

use crate::error::{tail, RewardError};
use crate::sandbox::{run, sandbox, shell_quote, timed_out, Run};

/// Scores a coding task by its tests, as SWE-bench, SWE-Gym and R2E-Gym do.
///
/// Reads from the task metadata (SWE-bench field names):
/// - `FAIL_TO_PASS`, `PASS_TO_PASS`: test ids (a list, or a JSON string holding one); at least
///   one of them non-empty. Ids are the runner's own, as [`parse_test_log`] reads them.
/// - `test_patch` (optional): a diff adding the tests. Before it is applied, every file it
///   touches is restored to `base_commit` (required then), so edits the agent made to those
///   test files cannot change the verdict.
/// - `test_cmd` (unless [`TestsReward::test_command`] is set) and `repo_dir` (unless
///   [`TestsReward::repo_dir`] is set; default `/testbed`).
///
/// The test command runs in the repository with stderr merged into stdout. The task is solved
/// (score 1.0) when every `FAIL_TO_PASS` and `PASS_TO_PASS` test passes (an expected failure
/// counts as a pass); a test missing from the log counts as failing; a test run past the
/// timeout scores 0. Details list the failing tests of each group and the log's tail.
///
/// ```
/// use uniagent_rewards::suite::{LogFormat, TestsReward};
/// let reward = TestsReward::new("python -m pytest -rA tests/test_calc.py")
///     .in_repo("/testbed")
///     .with_log_format(LogFormat::Pytest);
/// assert_eq!(reward.timeout, std::time::Duration::from_secs(1800));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TestsReward {
    /// The test command; `None` reads the task's `test_cmd`.
    pub test_command: Option<String>,
    /// The repository; `None` reads the task's `repo_dir`, else `/testbed`.
    pub repo_dir: Option<String>,
    /// The runner whose log is parsed.
    pub log_format: LogFormat,
    /// Seconds before the test run is interrupted (and scores 0). Must be positive and at most a
    /// week; other values are refused when the config is loaded.
    #[serde(rename = "timeout_secs", with = "crate::config::timeout_secs")]
    pub timeout: Duration,
    /// Bytes of the test log kept in the details.
    pub output_tail_bytes: usize,
}

impl Default for TestsReward {
    fn default() -> Self {
        Self {
            test_command: None,
            repo_dir: None,
            log_format: LogFormat::Auto,
            timeout: Duration::from_secs(1800),
            output_tail_bytes: 4000,
        }
    }
}

/// The metadata fields this reward reads.
const FAIL_TO_PASS: &str = "FAIL_TO_PASS";
const PASS_TO_PASS: &str = "PASS_TO_PASS";

impl TestsReward {
    /// Runs `test_command` in each task's repository.
    pub fn new(test_command: impl Into<String>) -> Self {
        Self {
            test_command: Some(test_command.into()),
            ..Self::default()
        }
    }

    /// Reads the command (`test_cmd`) and repository (`repo_dir`) from each task.
    pub fn from_task_metadata() -> Self {
        Self::default()
    }

    /// The repository directory in the sandbox.
    pub fn in_repo(mut self, dir: impl Into<String>) -> Self {
        self.repo_dir = Some(dir.into());
        self
    }

    /// Parses the log as `format`.
    pub fn with_log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// Interrupts the test run after `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn outcome(
        &self,
        ctx: &RewardContext<'_>,
    ) -> std::result::Result<RewardOutcome, RewardError> {
        let meta = &ctx.task.metadata;
        let fail_to_pass = test_list(meta.get(FAIL_TO_PASS), FAIL_TO_PASS)?;
        let pass_to_pass = test_list(meta.get(PASS_TO_PASS), PASS_TO_PASS)?;
        if fail_to_pass.is_empty() && pass_to_pass.is_empty() {
            return Err(RewardError::BadMetadata {
                field: format!("{FAIL_TO_PASS}/{PASS_TO_PASS}"),
                message: "both are empty: there is nothing to check".into(),
            });
        }
        let command = match &self.test_command {
            Some(command) => command.clone(),
            None => string_field(meta.get("test_cmd"), "test_cmd")?.ok_or_else(|| {
                RewardError::MissingMetadata {
                    field: "test_cmd".into(),
                }
            })?,
        };
        let repo = match &self.repo_dir {
            Some(dir) => dir.clone(),
            None => {
                string_field(meta.get("repo_dir"), "repo_dir")?.unwrap_or_else(|| "/testbed".into())
            }
        };
        let deployment = sandbox(ctx)?;

        if let Some(test_patch) = string_field(meta.get("test_patch"), "test_patch")? {
            let base = string_field(meta.get("base_commit"), "base_commit")?.ok_or_else(|| {
                RewardError::MissingMetadata {
                    field: "base_commit".into(),
                }
            })?;
            self.apply_test_patch(deployment, &repo, &base, &test_patch)
                .await?;
        }

        let response = match run(deployment, &command, Some(&repo), self.timeout).await? {
            Run::TimedOut => return Ok(timed_out(self.timeout)),
            Run::Finished(response) => response,
        };
        let results = parse_test_log(&response.stdout, self.log_format);
        let failing = |tests: &[String]| -> Vec<String> {
            tests
                .iter()
                .filter(|t| !results.get(t.as_str()).is_some_and(|s| s.counts_as_pass()))
                .cloned()
                .collect()
        };
        let f2p_failing = failing(&fail_to_pass);
        let p2p_failing = failing(&pass_to_pass);
        let missing: Vec<&String> = fail_to_pass
            .iter()
            .chain(&pass_to_pass)
            .filter(|t| !results.contains_key(t.as_str()))
            .collect();
        let solved = f2p_failing.is_empty() && p2p_failing.is_empty();
        Ok(RewardOutcome::binary(solved)
            .with_detail(
                "fail_to_pass_passed",
                json!(fail_to_pass.len() - f2p_failing.len()),
            )
            .with_detail("fail_to_pass_total", json!(fail_to_pass.len()))
            .with_detail(
                "pass_to_pass_passed",
                json!(pass_to_pass.len() - p2p_failing.len()),
            )
            .with_detail("pass_to_pass_total", json!(pass_to_pass.len()))
            .with_detail("fail_to_pass_failing", json!(f2p_failing))
            .with_detail("pass_to_pass_failing", json!(p2p_failing))
            .with_detail("missing_from_log", json!(missing))
            .with_detail("tests_in_log", json!(results.len()))
            .with_detail("exit_code", json!(response.exit_code))
            .with_detail("log", json!(tail(&response.stdout, self.output_tail_bytes))))
    }

    /// Restores the files the test patch touches to `base`, then applies it.
    async fn apply_test_patch(
        &self,
        deployment: &std::sync::Arc<dyn uniagent_core::Deployment>,
        repo: &str,
        base: &str,
        test_patch: &str,
    ) -> std::result::Result<(), RewardError> {
        let mut restore = String::from("set -e\n");
        for path in patch_paths(test_patch) {
            let (rev, file) = (shell_quote(&format!("{base}:{path}")), shell_quote(&path));
            restore.push_str(&format!(
                "if git cat-file -e {rev} 2>/dev/null; then git checkout {} -- {file}; else rm -f -- {file}; fi\n",
                shell_quote(base)
            ));
        }
        restore.push_str("git rev-parse --absolute-git-dir\n");
        let git_dir = self
            .setup_step(deployment, repo, &restore, "restoring the test files")
            .await?;
        let patch_file = format!("{}/uniagent-test.patch", git_dir.trim());
        deployment.write_text(&patch_file, test_patch).await?;
        self.setup_step(
            deployment,
            repo,
            &format!("git apply --whitespace=nowarn {}", shell_quote(&patch_file)),
            "applying the test patch",
        )
        .await?;
        Ok(())
    }

    async fn setup_step(
        &self,
        deployment: &std::sync::Arc<dyn uniagent_core::Deployment>,
        repo: &str,
        script: &str,
        step: &str,
    ) -> std::result::Result<String, RewardError> {
        match run(deployment, script, Some(repo), Duration::from_secs(120)).await? {
            Run::Finished(r) if r.exit_code == Some(0) => Ok(r.stdout),
            Run::Finished(r) => Err(RewardError::SetupFailed {
                step: step.into(),
                exit_code: r.exit_code,
                output: tail(&r.stdout, self.output_tail_bytes),
            }),
            Run::TimedOut => Err(RewardError::SetupFailed {
                step: step.into(),
                exit_code: None,
                output: "timed out after 120 s".into(),
            }),
        }
    }
}

/// A list of test ids: a JSON list, or a string holding one (as SWE-bench datasets store it).
/// Absent means empty.
fn test_list(value: Option<&Value>, field: &str) -> std::result::Result<Vec<String>, RewardError> {
    let bad = |message: String| RewardError::BadMetadata {
        field: field.into(),
        message,
    };
    let parsed;
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) => {
            parsed = serde_json::from_str::<Value>(text)
                .map_err(|e| bad(format!("not a JSON list of test ids: {e}")))?;
            &parsed
        }
        Some(other) => other,
    };
    let Value::Array(items) = list else {
        return Err(bad("must be a list of test ids".into()));
    };
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad(format!("test ids must be strings, found {item}")))
        })
        .collect()
}

fn string_field(
    value: Option<&Value>,
    field: &str,
) -> std::result::Result<Option<String>, RewardError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RewardError::BadMetadata {
            field: field.into(),
            message: "must be a string".into(),
        }),
    }
}

crate::spec::forward_reward_spec!(TestsReward, "tests");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_lists_are_lists_or_json_strings() {
        assert_eq!(
            test_list(Some(&json!(["a", "b"])), "F").unwrap(),
            ["a", "b"]
        );
        assert_eq!(
            test_list(Some(&json!("[\"a (m.C)\"]")), "F").unwrap(),
            ["a (m.C)"]
        );
        assert!(test_list(None, "F").unwrap().is_empty());
        for bad in [json!("not json"), json!({"a": 1}), json!([1]), json!("{}")] {
            let err = test_list(Some(&bad), "FAIL_TO_PASS").unwrap_err();
            assert!(err.to_string().contains("FAIL_TO_PASS"), "{err}");
        }
    }
}
