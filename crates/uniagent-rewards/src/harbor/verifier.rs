//! [`HarborVerifier`]: a Harbor task's `tests/test.sh` run after the loop, in the agent's
//! sandbox (Harbor's "shared" verifier) or in a fresh one holding the agent's final working
//! directory ("separate"), scored by the reward files it writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use uniagent_core::sandbox::UploadRequest;
use uniagent_core::{Deployment, DeploymentExt, RewardContext, RewardOutcome};

use super::config::{resolve_env, EnvironmentSection, VerifierMode};
use super::reward_file::{primary_score, rewards_from_files, REWARD_JSON, REWARD_KEY, REWARD_TXT};
use super::task::HarborTask;
use crate::error::{tail, RewardError};
use crate::sandbox::{run, sandbox, shell_quote, Run};

/// The task metadata field holding the task's directory on this machine.
pub const HARBOR_DIR_FIELD: &str = "harbor_dir";

/// Where `test.sh`'s output goes in the sandbox.
pub const TEST_OUTPUT: &str = "/logs/verifier/test-stdout.txt";

/// Where the archive of the agent's working directory is kept, in both sandboxes, while it is
/// carried to a separate verifier's.
const CARRIED_ARCHIVE: &str = "/tmp/uniagent-harbor-workdir.tar";

/// Bytes of that archive read per command: hex on stdout, well under the sandbox server's
/// output limit.
const CARRY_CHUNK: u64 = 4 << 20;

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
        if task.verifier_mode() == VerifierMode::Separate {
            return Err(RewardError::BadConfig {
                message: format!(
                    "task `{}` runs its verifier in a fresh sandbox, which only the `harbor` \
                     environment starts (HarborVerifier::verify_separate)",
                    task.name
                ),
            });
        }
        self.verify(sandbox(ctx)?, &task).await
    }

    /// Verifies `task` in `deployment` (the agent's sandbox, still running): Harbor's shared
    /// verifier.
    pub async fn verify(
        &self,
        deployment: &Arc<dyn Deployment>,
        task: &HarborTask,
    ) -> Result<RewardOutcome, RewardError> {
        let env = &task.config.environment;
        self.run_tests(deployment, task, env, env.workdir.as_deref())
            .await
    }

    /// Verifies `task` in `fresh` (a new sandbox of the verifier's image, started), Harbor's
    /// separate verifier: the agent's final working directory `workdir` is carried over from
    /// `agent` (archived there, unpacked in `fresh` in place of what the image holds there, so
    /// files the agent deleted are gone too), then `tests/` is uploaded to `fresh` only, and
    /// `test.sh` runs as in [`verify`](Self::verify), with `[verifier.environment]`'s variables
    /// and working directory when it has them (else the task's variables, in `workdir`).
    ///
    /// Carrying the files failing, or running past `[verifier] timeout_sec`, is
    /// [`RewardError::VerifierFailed`], as a verifier crash is.
    pub async fn verify_separate(
        &self,
        agent: &Arc<dyn Deployment>,
        fresh: &Arc<dyn Deployment>,
        task: &HarborTask,
        workdir: &str,
    ) -> Result<RewardOutcome, RewardError> {
        let timeout = Duration::from_secs_f64(task.config.verifier.timeout_sec);
        let carried = carry_workdir(agent, fresh, workdir, timeout).await?;
        let env = task.verifier_environment();
        let cwd = env.workdir.as_deref().unwrap_or(workdir);
        let outcome = self.run_tests(fresh, task, env, Some(cwd)).await?;
        Ok(outcome.with_detail("carried_bytes", json!(carried)))
    }

    /// `test.sh` in `deployment`, with `env`'s and the verifier's variables, in `workdir`.
    async fn run_tests(
        &self,
        deployment: &Arc<dyn Deployment>,
        task: &HarborTask,
        env_section: &EnvironmentSection,
        workdir: Option<&str>,
    ) -> Result<RewardOutcome, RewardError> {
        let timeout = Duration::from_secs_f64(task.config.verifier.timeout_sec);
        let prepare =
            "rm -rf /tests && rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json \
             && mkdir -p /tests /logs/verifier /logs/agent";
        expect_success(deployment, "preparing /tests and /logs/verifier", prepare).await?;
        upload_dir(deployment, &task.tests_dir(), "/tests").await?;
        let mut env = env_section.env.clone();
        env.extend(task.config.verifier.env.clone());
        let script = format!(
            "{}chmod +x /tests/test.sh && (/tests/test.sh) > {TEST_OUTPUT} 2>&1",
            exports(&env)?
        );
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

/// Copies the directory `workdir` of `agent` to the same path of `fresh`, replacing what was
/// there: a tar archive made in `agent`, read back in hex chunks, uploaded and unpacked.
/// Returns the archive's size.
async fn carry_workdir(
    agent: &Arc<dyn Deployment>,
    fresh: &Arc<dyn Deployment>,
    workdir: &str,
    timeout: Duration,
) -> Result<u64, RewardError> {
    let dir = workdir.trim_end_matches('/');
    if !dir.starts_with('/') {
        return Err(RewardError::VerifierFailed {
            message: format!(
                "the separate verifier carries the agent's working directory, and `{workdir}` is \
                 `/` or relative: set [environment] workdir (or a WORKDIR in the Dockerfile)"
            ),
        });
    }
    let (quoted, archive) = (shell_quote(dir), shell_quote(CARRIED_ARCHIVE));
    let pack = format!("tar -C {quoted} -cf {archive} . && stat -c %s {archive}");
    let listed = checked(
        agent,
        "archiving the agent's working directory",
        &pack,
        timeout,
    )
    .await?;
    let size: u64 = listed
        .trim()
        .parse()
        .map_err(|_| RewardError::VerifierFailed {
            message: format!("archiving the agent's working directory printed {listed:?}"),
        })?;
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    while (data.len() as u64) < size {
        let read = format!(
            "tail -c +{} {archive} | head -c {CARRY_CHUNK} | od -An -v -tx1 | tr -d ' \\n'",
            data.len() + 1
        );
        let hex = checked(
            agent,
            "reading the archive of the agent's work",
            &read,
            timeout,
        )
        .await?;
        let chunk = from_hex(hex.trim()).ok_or_else(|| RewardError::VerifierFailed {
            message: "reading the archive of the agent's work: not hex".into(),
        })?;
        if chunk.is_empty() {
            return Err(RewardError::VerifierFailed {
                message: format!(
                    "the archive of the agent's work ended at {} of {size} bytes",
                    data.len()
                ),
            });
        }
        data.extend(chunk);
    }
    // Best-effort: the archive is scratch in the agent's sandbox.
    let _ = agent
        .sh(&format!("rm -f {archive}"), Duration::from_secs(30))
        .await;
    fresh
        .upload(UploadRequest {
            data,
            target_path: CARRIED_ARCHIVE.into(),
            unzip: false,
        })
        .await?;
    let unpack = format!(
        "mkdir -p {quoted} && find {quoted} -mindepth 1 -delete && tar -C {quoted} -xf {archive} \
         && rm -f {archive}"
    );
    checked(
        fresh,
        "unpacking the agent's work in the verifier's sandbox",
        &unpack,
        timeout,
    )
    .await?;
    Ok(size)
}

/// The stdout of `script`, which must exit 0 within `timeout`: anything else is a verifier
/// failure naming `step`.
async fn checked(
    deployment: &Arc<dyn Deployment>,
    step: &str,
    script: &str,
    timeout: Duration,
) -> Result<String, RewardError> {
    match run(deployment, script, None, timeout).await? {
        Run::Finished(r) if r.exit_code == Some(0) => Ok(r.stdout),
        Run::Finished(r) => Err(RewardError::VerifierFailed {
            message: format!(
                "{step} failed (exit code {:?}): {}",
                r.exit_code,
                tail(&r.stdout, 500)
            ),
        }),
        Run::TimedOut => Err(RewardError::VerifierFailed {
            message: format!(
                "{step} ran past [verifier] timeout_sec = {}",
                timeout.as_secs_f64()
            ),
        }),
    }
}

/// Bytes of a lowercase or uppercase hex string; `None` when it is not one.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_reads_back_every_byte_and_refuses_the_rest() {
        let bytes: Vec<u8> = (0..=255).collect();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(from_hex(&hex), Some(bytes));
        assert_eq!(from_hex("0A"), Some(vec![10]));
        assert_eq!(from_hex(""), Some(vec![]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex("+f"), None);
    }
}
