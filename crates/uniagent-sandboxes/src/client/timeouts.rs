//! Transport timeouts derived from the command timeouts a request carries.
//!
//! A request's HTTP deadline must never end before the server-side deadline it carries, or the
//! client gives up while the command still runs and reports an infrastructure failure instead of
//! the server's `CommandTimeoutError` (a fault of Uni-Agent's client). Every function here returns the
//! command's own worst case plus a margin, or `None` (no transport deadline) when the command
//! may legitimately run forever.

use std::time::Duration;

use uniagent_core::sandbox::{Action, Command, CreateSessionRequest};

/// What the server may spend on one `bash_interrupt` beyond its per-attempt waits: SWE-ReX sleeps
/// 0.2 s between attempts, drains for 0.5 s and runs a Ctrl-Z / `kill -9` fallback.
const INTERRUPT_OVERHEAD_SECS: f64 = 1.5;
/// SWE-ReX's fixed sleeps around session start (0.3 s, +0.3 s with `startup_source`).
const SESSION_START_OVERHEAD_SECS: f64 = 0.6;

/// Seconds as a duration; `None` for values that are not finite and non-negative.
fn secs(value: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(value).ok()
}

/// The HTTP deadline of `POST /run_in_session`.
///
/// `None` when the action waits forever (`timeout: null`); liveness is then left to TCP
/// keep-alive.
///
/// ```
/// use std::time::Duration;
/// use uniagent_core::sandbox::{Action, BashAction};
/// use uniagent_sandboxes::client::run_in_session_timeout;
///
/// let margin = Duration::from_secs(30);
/// let a = Action::Bash(BashAction::new("default", "make test", Some(600.0)));
/// assert_eq!(run_in_session_timeout(&a, margin), Some(Duration::from_secs(630)));
/// let forever = Action::Bash(BashAction::new("default", "sleep 1d", None));
/// assert_eq!(run_in_session_timeout(&forever, margin), None);
/// ```
pub fn run_in_session_timeout(action: &Action, margin: Duration) -> Option<Duration> {
    let server_side = match action {
        Action::Bash(a) => a.timeout?,
        Action::Interrupt(a) => {
            let attempts = f64::from(a.n_retry.max(1)) + 2.0;
            a.timeout.max(0.0) * attempts + 0.2 * f64::from(a.n_retry) + INTERRUPT_OVERHEAD_SECS
        }
    };
    Some(secs(server_side.max(0.0))? + margin)
}

/// The HTTP deadline of `POST /execute`; `None` when the command has no timeout.
pub fn execute_timeout(command: &Command, margin: Duration) -> Option<Duration> {
    Some(secs(command.timeout?.max(0.0))? + margin)
}

/// The HTTP deadline of `POST /create_session`.
pub fn create_session_timeout(
    request: &CreateSessionRequest,
    margin: Duration,
) -> Option<Duration> {
    Some(secs(request.startup_timeout.max(0.0) + SESSION_START_OVERHEAD_SECS)? + margin)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use uniagent_core::sandbox::{BashAction, BashInterruptAction};

    use super::*;

    proptest! {
        #[test]
        fn transport_deadlines_always_exceed_the_command_deadline(
            t in 0.0f64..1.0e6, n_retry in 0u32..20, margin_ms in 1u64..120_000,
        ) {
            let margin = Duration::from_millis(margin_ms);
            let bash = Action::Bash(BashAction::new("s", "x", Some(t)));
            let d = run_in_session_timeout(&bash, margin).unwrap();
            prop_assert!(d.as_secs_f64() > t);
            let interrupt = Action::Interrupt(BashInterruptAction { session: "s".into(), timeout: t, n_retry, expect: vec![] });
            let d = run_in_session_timeout(&interrupt, margin).unwrap();
            prop_assert!(d.as_secs_f64() > t * f64::from(n_retry.max(1)));
            let cmd = Command::shell("x", Some(t));
            prop_assert!(execute_timeout(&cmd, margin).unwrap().as_secs_f64() > t);
            let create = CreateSessionRequest { startup_timeout: t, ..CreateSessionRequest::new("s") };
            prop_assert!(create_session_timeout(&create, margin).unwrap().as_secs_f64() > t);
        }
    }

    #[test]
    fn no_command_timeout_means_no_transport_deadline() {
        let margin = Duration::from_secs(1);
        assert_eq!(execute_timeout(&Command::shell("x", None), margin), None);
        assert_eq!(
            run_in_session_timeout(&Action::Bash(BashAction::new("s", "x", None)), margin),
            None
        );
    }

    #[test]
    fn non_finite_timeouts_do_not_panic() {
        let margin = Duration::from_secs(1);
        assert_eq!(
            execute_timeout(&Command::shell("x", Some(f64::INFINITY)), margin),
            None
        );
        assert_eq!(
            execute_timeout(&Command::shell("x", Some(f64::NAN)), margin),
            Some(margin)
        );
        assert_eq!(
            execute_timeout(&Command::shell("x", Some(-3.0)), margin),
            Some(margin)
        );
    }
}
