//! Harbor's oracle: a task's `solution/solve.sh` run in its sandbox in place of an agent, as
//! Harbor's oracle agent runs it (uploaded to `/solution`, output to `/logs/agent/oracle.txt`).
//! A task whose oracle does not then score 1 is broken.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use uniagent_core::Deployment;

use super::task::HarborTask;
use super::verifier::{expect_success, exports, read_optional, upload_dir};
use crate::error::{tail, RewardError};
use crate::sandbox::{run, Run};

/// Where the solution's output goes in the sandbox.
pub const ORACLE_OUTPUT: &str = "/logs/agent/oracle.txt";

/// How long a solution may run when the task sets no `[agent] timeout_sec`.
pub const DEFAULT_ORACLE_TIMEOUT: Duration = Duration::from_secs(600);

/// What running the solution did (its exit code does not decide anything: the verifier does).
#[derive(Debug, Clone, PartialEq)]
pub struct OracleRun {
    /// `solve.sh`'s exit code (`None` when it ran past its timeout).
    pub exit_code: Option<i32>,
    /// It ran past `[agent] timeout_sec` and was stopped.
    pub timed_out: bool,
    /// The tail of its output.
    pub output: String,
}

/// Runs `task`'s `solution/solve.sh` in `deployment` (started, fresh): `solution/` replaces
/// `/solution`, then `(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1` runs in the task's
/// working directory with `[environment] env`, `[solution] env` and
/// `DEBIAN_FRONTEND=noninteractive`, under `[agent] timeout_sec` (else 600 s).
///
/// A task without `solution/solve.sh` is an error naming it.
pub async fn run_solution(
    deployment: &Arc<dyn Deployment>,
    task: &HarborTask,
) -> Result<OracleRun, RewardError> {
    if task.solution_script().is_none() {
        return Err(RewardError::BadConfig {
            message: format!(
                "{}: no solution/solve.sh to run as the oracle",
                task.dir.display()
            ),
        });
    }
    let prepare = "rm -rf /solution && mkdir -p /solution /logs/agent";
    expect_success(deployment, "preparing /solution", prepare).await?;
    upload_dir(deployment, &task.dir.join("solution"), "/solution").await?;
    let mut env = BTreeMap::from([("DEBIAN_FRONTEND".to_owned(), "noninteractive".to_owned())]);
    env.extend(task.config.environment.env.clone());
    env.extend(task.config.solution.env.clone());
    let script = format!(
        "{}chmod +x /solution/solve.sh && (/solution/solve.sh) > {ORACLE_OUTPUT} 2>&1",
        exports(&env)?
    );
    let timeout = task
        .config
        .agent
        .timeout_sec
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_ORACLE_TIMEOUT);
    let workdir = task.config.environment.workdir.as_deref();
    let (exit_code, timed_out) = match run(deployment, &script, workdir, timeout).await? {
        Run::Finished(response) => (response.exit_code, false),
        Run::TimedOut => (None, true),
    };
    let output = read_optional(deployment, ORACLE_OUTPUT)
        .await?
        .unwrap_or_default();
    Ok(OracleRun {
        exit_code,
        timed_out,
        output: tail(&output, 2000),
    })
}
