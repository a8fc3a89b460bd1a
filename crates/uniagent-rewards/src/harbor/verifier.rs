//! [`HarborVerifier`]: a Harbor task's `tests/test.sh` run in the agent's sandbox after the
//! loop (Harbor's "shared" verifier), scored by the reward files it writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use uniagent_core::sandbox::UploadRequest;
use uniagent_core::{Deployment, DeploymentExt, RewardContext, RewardOutcome};

use super::config::resolve_env;
use super::reward_file::{primary_score, rewards_from_files, REWARD_JSON, REWARD_KEY, REWARD_TXT};
use super::task::HarborTask;
use crate::error::{tail, RewardError};
use crate::sandbox::{run, sandbox, shell_quote, Run};

/// The task metadata field holding the task's directory on this machine.
pub const HARBOR_DIR_FIELD: &str = "harbor_dir";

/// Where `test.sh`'s output goes in the sandbox.
pub const TEST_OUTPUT: &str = "/logs/verifier/test-stdout.txt";

/// Runs the task's verifier in the rollout's sandbox, as Harbor's shared verifier does: stale
/// reward files are removed, the task's `tests/` replaces `/tests` (the agent never saw it),
/// `(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1` runs with the task's verifier and
/// environment variables, in `[environment] workdir` when set, under `[verifier] timeout_sec`.
/// Its exit code does not count: the score is the reward files' `primary` key (else their
/// only value); every key goes into the details.
///
/// No reward file, a malformed one, a timeout, or a primary key missing among several are
/// errors (the rollout's reward failed), never a score of 0, as in Harbor.
///
/// ```
/// use uniagent_rewards::harbor::HarborVerifier;
/// let verifier = HarborVerifier::default();
/// assert_eq!(verifier.primary, "reward");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarborVerifier {
    /// The key of `reward.json` that is the score (default `reward`).
    pub primary: String,
    /// Bytes of `test.sh`'s output kept in the details.
    pub output_tail_bytes: usize,
}

impl Default for HarborVerifier {
    fn default() -> Self {
        Self {
            primary: REWARD_KEY.to_owned(),
            output_tail_bytes: 2000,
        }
    }
}

impl HarborVerifier {
    async fn outcome(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome, RewardError> {
        let dir = match ctx.task.metadata.get(HARBOR_DIR_FIELD) {
            Some(serde_json::Value::String(dir)) => PathBuf::from(dir),
            Some(_) => {
                return Err(RewardError::BadMetadata {
                    field: HARBOR_DIR_FIELD.into(),
                    message: "must be a string".into(),
                })
            }
            None => {
                return Err(RewardError::MissingMetadata {
                    field: HARBOR_DIR_FIELD.into(),
                })
            }
        };
        let task = HarborTask::load(&dir).map_err(|e| RewardError::BadMetadata {
            field: HARBOR_DIR_FIELD.into(),
            message: e.to_string(),
        })?;
        self.verify(sandbox(ctx)?, &task).await
    }

    /// Verifies `task` in `deployment` (the agent's sandbox, still running).
    pub async fn verify(
        &self,
        deployment: &Arc<dyn Deployment>,
        task: &HarborTask,
    ) -> Result<RewardOutcome, RewardError> {
        let timeout = Duration::from_secs_f64(task.config.verifier.timeout_sec);
        let prepare =
            "rm -rf /tests && rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json \
             && mkdir -p /tests /logs/verifier /logs/agent";
        expect_success(deployment, "preparing /tests and /logs/verifier", prepare).await?;
        upload_dir(deployment, &task.tests_dir(), "/tests").await?;
        let mut env = task.config.environment.env.clone();
        env.extend(task.config.verifier.env.clone());
        let script = format!(
            "{}chmod +x /tests/test.sh && (/tests/test.sh) > {TEST_OUTPUT} 2>&1",
            exports(&env)?
        );
        let workdir = task.config.environment.workdir.as_deref();
        let ran = run(deployment, &script, workdir, timeout).await?;
        let exit_code = match ran {
            Run::Finished(response) => response.exit_code,
            Run::TimedOut => {
                return Err(RewardError::VerifierFailed {
                    message: format!(
                        "tests/test.sh ran past [verifier] timeout_sec = {}",
                        timeout.as_secs_f64()
                    ),
                })
            }
        };
        let json = read_optional(deployment, REWARD_JSON).await?;
        let txt = read_optional(deployment, REWARD_TXT).await?;
        let output = read_optional(deployment, TEST_OUTPUT)
            .await?
            .unwrap_or_default();
        let rewards = rewards_from_files(json.as_deref(), txt.as_deref()).map_err(|e| {
            RewardError::VerifierFailed {
                message: format!("{e}; test.sh output: {}", tail(&output, 500)),
            }
        })?;
        let score = primary_score(&rewards, &self.primary).ok_or_else(|| {
            RewardError::VerifierFailed {
                message: format!(
                    "the rewards {rewards:?} have no `{}` key to score by (set the verifier's `primary`)",
                    self.primary
                ),
            }
        })?;
        Ok(RewardOutcome {
            score,
            success: score >= 1.0,
            details: Default::default(),
        }
        .with_detail("rewards", json!(rewards))
        .with_detail("test_exit_code", json!(exit_code))
        .with_detail("output", json!(tail(&output, self.output_tail_bytes))))
    }
}

crate::spec::forward_reward_spec!(HarborVerifier, "harbor");

/// `export K='v'; ...` for `env`, values read through `${VAR}` from this host.
pub(super) fn exports(env: &BTreeMap<String, String>) -> Result<String, RewardError> {
    let lookup = |name: &str| std::env::var(name).ok();
    env.iter()
        .map(|(k, v)| {
            let valid = !k.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(RewardError::BadConfig {
                    message: format!("`{k}` is not an environment variable name"),
                });
            }
            let value =
                resolve_env(v, &lookup).map_err(|message| RewardError::BadConfig { message })?;
            Ok(format!("export {k}={}; ", shell_quote(&value)))
        })
        .collect()
}

pub(super) async fn expect_success(
    deployment: &Arc<dyn Deployment>,
    step: &str,
    script: &str,
) -> Result<(), RewardError> {
    let response = deployment.sh(script, Duration::from_secs(60)).await?;
    if response.exit_code == Some(0) {
        return Ok(());
    }
    Err(RewardError::SetupFailed {
        step: step.to_owned(),
        exit_code: response.exit_code,
        output: tail(&format!("{}{}", response.stdout, response.stderr), 500),
    })
}

/// Uploads every file under `dir` to the same relative path under `target`.
pub(super) async fn upload_dir(
    deployment: &Arc<dyn Deployment>,
    dir: &Path,
    target: &str,
) -> Result<(), RewardError> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let entries = std::fs::read_dir(&at).map_err(|e| RewardError::BadConfig {
            message: format!("reading {}: {e}", at.display()),
        })?;
        for entry in entries {
            let path = entry
                .map_err(|e| RewardError::BadConfig {
                    message: format!("reading {}: {e}", at.display()),
                })?
                .path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path.strip_prefix(dir).unwrap_or(&path);
            let data = std::fs::read(&path).map_err(|e| RewardError::BadConfig {
                message: format!("reading {}: {e}", path.display()),
            })?;
            deployment
                .upload(UploadRequest {
                    data,
                    target_path: format!("{target}/{}", relative.to_string_lossy()),
                    unzip: false,
                })
                .await?;
        }
    }
    Ok(())
}

/// The text of `path` in the sandbox, `None` when it does not exist.
pub(super) async fn read_optional(
    deployment: &Arc<dyn Deployment>,
    path: &str,
) -> Result<Option<String>, RewardError> {
    let script = format!(
        "if [ -f {p} ]; then printf x; cat {p}; fi",
        p = shell_quote(path)
    );
    let response = deployment.sh(&script, Duration::from_secs(60)).await?;
    Ok(response.stdout.strip_prefix('x').map(str::to_owned))
}
