//! Running one command in the trajectory's bash session, with timeouts turned into data and the
//! session interrupted and checked afterwards.

use std::time::Duration;

use uniagent_core::sandbox::{Action, BashAction, BashInterruptAction, ExceptionClass};
use uniagent_core::{Deployment, Error, Result};

use super::bash::clean_terminal_output;

/// How a session command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOutcome {
    /// It completed; the exit code is `None` when the server could not read it.
    Completed {
        /// stdout and stderr, interleaved as the terminal showed them; terminal escape
        /// sequences, carriage returns and leading newlines (SWE-ReX's shell emits an escape
        /// sequence and a newline first) removed.
        output: String,
        /// The exit code.
        exit_code: Option<i32>,
    },
    /// It ran past its timeout; it was interrupted and the session answers again.
    TimedOut,
    /// The server refused it as bad bash syntax (`bash -n`); nothing ran.
    Syntax {
        /// What `bash -n` said.
        details: String,
    },
}

/// The text the interrupt probe echoes.
const ALIVE_MARKER: &str = "uniagent-session-alive";

/// Seconds as the protocol's float, at least a millisecond.
pub fn timeout_secs(timeout: Duration) -> f64 {
    timeout.as_secs_f64().max(0.001)
}

/// Runs `command` in `session` with `timeout` (exit code as data).
///
/// A timeout interrupts the session (Ctrl-C, then the server's harder fallbacks) and checks it
/// answers again before returning [`SessionOutcome::TimedOut`]; a session that stays dead is an
/// `Err` (the episode cannot continue). Other runtime exceptions are `Err` too.
pub async fn run_in_session(
    deployment: &dyn Deployment,
    session: &str,
    command: &str,
    timeout: Duration,
) -> Result<SessionOutcome> {
    let action = Action::Bash(BashAction::new(
        session,
        command,
        Some(timeout_secs(timeout)),
    ));
    match deployment.run_in_session(action).await {
        Ok(obs) => {
            let cleaned = clean_terminal_output(&obs.output);
            let output = cleaned.trim_start_matches('\n').to_owned();
            Ok(SessionOutcome::Completed {
                output,
                exit_code: obs.exit_code,
            })
        }
        Err(Error::Runtime { exception, .. })
            if exception.class() == ExceptionClass::BashIncorrectSyntax =>
        {
            let field = |k: &str| {
                exception
                    .extra_info
                    .get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let details = format!("{}\n{}", field("bash_stdout"), field("bash_stderr"));
            Ok(SessionOutcome::Syntax { details })
        }
        Err(Error::Runtime { exception, .. })
            if exception.class() == ExceptionClass::CommandTimeout =>
        {
            recover(deployment, session).await?;
            Ok(SessionOutcome::TimedOut)
        }
        Err(e) => Err(e),
    }
}

/// Brings `session` back after a timed-out command and checks the shell answers again.
///
/// Some servers (ours) stop a timed-out command themselves, others (SWE-ReX) leave it running.
/// So a quick probe comes first; only if the shell does not answer is it interrupted (Ctrl-C,
/// then the server's harder fallbacks) and probed again. Interrupting a shell that is already
/// idle is avoided: it gains nothing and races with the prompt.
pub async fn recover(deployment: &dyn Deployment, session: &str) -> Result<()> {
    if probe(deployment, session, Duration::from_secs(2))
        .await
        .is_ok()
    {
        return Ok(());
    }
    let interrupt = BashInterruptAction {
        session: session.to_owned(),
        timeout: 5.0,
        n_retry: 3,
        expect: Vec::new(),
    };
    let mut interrupted = deployment
        .run_in_session(Action::Interrupt(interrupt.clone()))
        .await;
    if interrupted.is_err() {
        // Once more: a pooled keep-alive connection the server closed just then fails the
        // request before it arrives ("connection closed before message completed"), and a
        // second Ctrl-C to a shell is harmless.
        interrupted = deployment
            .run_in_session(Action::Interrupt(interrupt))
            .await;
    }
    probe(deployment, session, Duration::from_secs(10)).await.map_err(|probe| Error::Sandbox {
        backend: deployment.backend().to_owned(),
        message: format!(
            "session `{session}` did not recover after a timed-out command (interrupt: {}, probe: {probe})",
            match &interrupted {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.to_string(),
            },
        ),
        retryable: false,
        source: None,
    })
}

/// Runs `echo <marker>` in the session; `Err` describes why the shell did not answer.
async fn probe(
    deployment: &dyn Deployment,
    session: &str,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let action = Action::Bash(BashAction::new(
        session,
        format!("echo {ALIVE_MARKER}"),
        Some(timeout_secs(timeout)),
    ));
    match deployment.run_in_session(action).await {
        Ok(obs) if obs.output.lines().any(|l| l.trim() == ALIVE_MARKER) => Ok(()),
        Ok(obs) => Err(format!("unexpected output {:?}", obs.output)),
        Err(e) => Err(e.to_string()),
    }
}

/// Quotes `text` as one word for a POSIX shell (re-exported from `uniagent_core`).
pub use uniagent_core::sandbox::shell_quote;
