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

/// What [`run_reporting_status`] prints after a command's output, followed by its exit status.
const STATUS_MARKER: &str = "__uniagent_exit_status=";

/// Runs one command of a tool's own making (never a user's free-form bash) with its exit status
/// printed after its output, so the tool knows it even when the server does not.
///
/// SWE-ReX reads the exit code with a second command and gives up when the prompt after it comes
/// back later than 0.1 s, as on a loaded machine: it then answers `exit_code: None` and leaves
/// that prompt (`SHELLPS1PREFIX`) in the output. The status printed in-band survives that, and
/// whatever the server appended after it is dropped. Where the marker is missing (the command
/// was killed, or the server lost the output) the server's exit code stands.
pub async fn run_reporting_status(
    deployment: &dyn Deployment,
    session: &str,
    command: &str,
    timeout: Duration,
) -> Result<SessionOutcome> {
    Ok(
        match run_in_session(deployment, session, &report_status(command), timeout).await? {
            SessionOutcome::Completed { output, exit_code } => match split_status(&output) {
                Some((output, status)) => SessionOutcome::Completed {
                    output: output.to_owned(),
                    exit_code: Some(status),
                },
                None => SessionOutcome::Completed { output, exit_code },
            },
            other => other,
        },
    )
}

/// `command` followed by printing its exit status after a marker, on a line of its own: what
/// [`run_reporting_status`] sends to the session.
///
/// ```
/// use uniagent_tools::tools::session::report_status;
///
/// assert_eq!(
///     report_status("ls /testbed"),
///     r#"ls /testbed; printf '\n__uniagent_exit_status=%s\n' "$?""#
/// );
/// ```
pub fn report_status(command: &str) -> String {
    format!("{command}; printf '\\n{STATUS_MARKER}%s\\n' \"$?\"")
}

/// The output before the last status marker (without the newline printed before it) and the
/// status after it; `None` when there is no marker followed by a number.
fn split_status(output: &str) -> Option<(&str, i32)> {
    let at = output.rfind(STATUS_MARKER)?;
    let digits: String = output[at + STATUS_MARKER.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let status = digits.parse().ok()?;
    let before = &output[..at];
    Some((before.strip_suffix('\n').unwrap_or(before), status))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_is_read_after_the_output_and_what_follows_it_is_dropped() {
        let marker = STATUS_MARKER;
        // As SWE-ReX answers when its last prompt came late: its prompt left at the end.
        let late = format!("line 1\nline 2\n{marker}0\n\nSHELLPS1PREFIX");
        assert_eq!(split_status(&late), Some(("line 1\nline 2", 0)));
        // Output without a final newline keeps it missing; the tool's own text may mention
        // the marker, the last one counts.
        let spoof = format!("{marker}0 no newline{marker}127\n");
        assert_eq!(
            split_status(&format!("{spoof}\n{marker}3")),
            Some((spoof.as_str(), 3))
        );
        // No output at all: run_in_session already trimmed the leading newline.
        assert_eq!(split_status(&format!("{marker}1\n")), Some(("", 1)));
        assert_eq!(split_status("killed before the status"), None);
        assert_eq!(split_status(&format!("cut {marker}")), None);
    }
}
