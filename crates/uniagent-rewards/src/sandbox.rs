//! Running a scoring command in the task's sandbox, where a timeout is a result, not an error.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use uniagent_core::sandbox::{Command, CommandResponse};
use uniagent_core::{Deployment, ErrorKind, RewardContext, RewardOutcome};

use crate::error::RewardError;

/// How a scoring command ended.
#[derive(Debug)]
pub(crate) enum Run {
    /// It ran to the end (any exit code).
    Finished(CommandResponse),
    /// It ran past its timeout and was interrupted: the work under test hangs, which scores
    /// like a failure.
    TimedOut,
}

/// The rollout's sandbox, or [`RewardError::NoSandbox`].
pub(crate) fn sandbox<'a>(ctx: &RewardContext<'a>) -> Result<&'a Arc<dyn Deployment>, RewardError> {
    ctx.deployment.ok_or(RewardError::NoSandbox)
}

/// Runs `script` with `bash -c`-like semantics (the server's shell), stderr merged into stdout,
/// in `cwd` when given.
pub(crate) async fn run(
    deployment: &Arc<dyn Deployment>,
    script: &str,
    cwd: Option<&str>,
    timeout: Duration,
) -> Result<Run, RewardError> {
    if let Some(message) = crate::config::timeout_problem(timeout.as_secs_f64()) {
        return Err(RewardError::BadConfig { message });
    }
    let mut command = Command::shell(script, Some(timeout.as_secs_f64()));
    command.cwd = cwd.map(str::to_owned);
    command.merge_output_streams = true;
    match deployment.execute(command).await {
        Ok(response) => Ok(Run::Finished(response)),
        Err(e) if e.kind() == ErrorKind::Timeout => Ok(Run::TimedOut),
        Err(e) => Err(e.into()),
    }
}

pub(crate) use uniagent_core::sandbox::shell_quote;

/// The outcome of a scoring command that ran past its timeout: a failure that says so.
pub(crate) fn timed_out(timeout: Duration) -> RewardOutcome {
    RewardOutcome::binary(false)
        .with_detail("timed_out", json!(true))
        .with_detail("timeout_secs", json!(timeout.as_secs_f64()))
}
