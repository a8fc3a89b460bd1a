//! The conformance suite every [`Deployment`] backend must pass (feature `conformance`).
//!
//! [`run_all`] starts a fresh deployment, runs every check its
//! [`Capabilities`](uniagent_core::Capabilities) allow, stops it (twice) and returns a
//! [`Report`]. A backend's integration test is then two lines:
//!
//! ```no_run
//! # async fn demo() {
//! use uniagent_sandboxes::{conformance, HostConfig, HostDeployment};
//!
//! let report = conformance::run_all(&HostDeployment::new(HostConfig::default())).await;
//! assert!(report.is_success(), "{}", report.summary());
//! # }
//! ```
//!
//! The checks only use the [`Deployment`] trait, need `sh`-compatible coreutils (`od`, `seq`,
//! `mkfifo`, `sleep`) inside the sandbox and a writable `/tmp`, and never depend on timing
//! beyond generous deadlines: concurrency is shown by a rendezvous that a serialising server
//! cannot complete, not by measuring.

mod commands;
mod files;
mod sessions;

use std::fmt::Write as _;
use std::future::Future;

use uniagent_core::sandbox::{
    Action, BashAction, CheckMode, CloseSessionRequest, CreateSessionRequest, ExceptionClass,
    RemoteException,
};
use uniagent_core::{Deployment, Error};

/// Why a check did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The backend lacks a capability the check needs.
    Skipped(String),
    /// The backend broke the contract.
    Failed(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self::Failed(format!("unexpected error: {e}"))
    }
}

/// The outcome of one check.
pub type Outcome = Result<(), Failure>;

/// Fails the check with a formatted message unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::conformance::Failure::Failed(format!($($fmt)+)));
        }
    };
}
pub(crate) use ensure;

/// What [`run_all`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The backend's name.
    pub backend: String,
    /// Checks that passed.
    pub passed: Vec<&'static str>,
    /// Checks skipped for a missing capability, with the reason.
    pub skipped: Vec<(&'static str, String)>,
    /// Checks that failed, with what went wrong.
    pub failed: Vec<(&'static str, String)>,
}

impl Report {
    /// No check failed.
    pub fn is_success(&self) -> bool {
        self.failed.is_empty() && !self.passed.is_empty()
    }

    /// One line per check.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "conformance of `{}`: {} passed, {} skipped, {} failed\n",
            self.backend,
            self.passed.len(),
            self.skipped.len(),
            self.failed.len()
        );
        for name in &self.passed {
            let _ = writeln!(out, "  pass  {name}");
        }
        for (name, why) in &self.skipped {
            let _ = writeln!(out, "  skip  {name}: {why}");
        }
        for (name, why) in &self.failed {
            let _ = writeln!(out, "  FAIL  {name}: {why}");
        }
        out
    }

    fn record(&mut self, name: &'static str, outcome: Outcome) {
        match outcome {
            Ok(()) => self.passed.push(name),
            Err(Failure::Skipped(why)) => self.skipped.push((name, why)),
            Err(Failure::Failed(why)) => self.failed.push((name, why)),
        }
    }
}

/// Names of the checks in the order [`run_all`] runs them.
pub const CHECKS: &[&str] = &[
    "start_and_alive",
    "execute_round_trip",
    "exit_codes",
    "stdout_and_stderr",
    "session_state_persists",
    "session_lifecycle_errors",
    "timeouts_and_recovery",
    "large_outputs",
    "text_files",
    "binary_files_and_zip_upload",
    "concurrent_sessions",
    "no_leaked_processes",
    "stop_is_idempotent",
];

/// Runs the whole suite on a deployment that was **not started yet**; it is stopped at the end.
pub async fn run_all(deployment: &dyn Deployment) -> Report {
    let mut report = Report {
        backend: deployment.backend().to_owned(),
        ..Report::default()
    };
    let caps = deployment.capabilities();
    let started = start_and_alive(deployment).await;
    let ok = started.is_ok();
    report.record("start_and_alive", started);
    if !ok {
        let _ = deployment.stop().await;
        return report;
    }
    let scratch = format!("/tmp/uniagent-conformance-{:016x}", fastrand::u64(..));
    let d = deployment;
    report.record(
        "execute_round_trip",
        commands::execute_round_trip(d, caps).await,
    );
    report.record("exit_codes", commands::exit_codes(d, caps).await);
    report.record(
        "stdout_and_stderr",
        commands::stdout_and_stderr(d, caps).await,
    );
    report.record(
        "session_state_persists",
        sessions::state_persists(d, caps).await,
    );
    report.record(
        "session_lifecycle_errors",
        sessions::lifecycle_errors(d, caps).await,
    );
    report.record(
        "timeouts_and_recovery",
        commands::timeouts_and_recovery(d, caps).await,
    );
    report.record("large_outputs", commands::large_outputs(d, caps).await);
    report.record("text_files", files::text_files(d, caps, &scratch).await);
    report.record(
        "binary_files_and_zip_upload",
        files::binary_files_and_zip_upload(d, caps, &scratch).await,
    );
    report.record(
        "concurrent_sessions",
        sessions::concurrent_sessions(d, caps, &scratch).await,
    );
    report.record(
        "no_leaked_processes",
        sessions::no_leaked_processes(d, caps).await,
    );
    if caps.execute {
        let _ = d
            .execute(uniagent_core::sandbox::Command::argv(
                ["rm", "-rf", scratch.as_str()],
                Some(30.0),
            ))
            .await;
    }
    report.record("stop_is_idempotent", stop_is_idempotent(d).await);
    report
}

/// `start` returns once the runtime answers `is_alive`.
pub async fn start_and_alive(d: &dyn Deployment) -> Outcome {
    d.start().await?;
    let alive = d.is_alive().await?;
    ensure!(alive.is_alive, "is_alive after start answered {alive:?}");
    d.start()
        .await
        .map_err(|e| Failure::Failed(format!("a second start must be a no-op, got {e}")))?;
    Ok(())
}

/// `stop` twice succeeds; operations afterwards fail with an error, not a panic or a hang.
pub async fn stop_is_idempotent(d: &dyn Deployment) -> Outcome {
    d.stop().await?;
    d.stop()
        .await
        .map_err(|e| Failure::Failed(format!("second stop failed: {e}")))?;
    let after =
        with_deadline(d.execute(uniagent_core::sandbox::Command::shell("echo hi", Some(5.0))))
            .await?;
    ensure!(after.is_err(), "execute after stop succeeded: {after:?}");
    Ok(())
}

/// Skips the check unless `needed` holds.
pub(crate) fn require(needed: bool, capability: &str) -> Outcome {
    if needed {
        Ok(())
    } else {
        Err(Failure::Skipped(format!("backend lacks `{capability}`")))
    }
}

/// Fails when an operation takes longer than a minute (a hang, not slowness).
pub(crate) async fn with_deadline<T>(fut: impl Future<Output = T>) -> Result<T, Failure> {
    tokio::time::timeout(std::time::Duration::from_secs(60), fut)
        .await
        .map_err(|_| Failure::Failed("operation hung for 60 s".into()))
}

/// The runtime exception of `result`, which must be one of class `class`.
pub(crate) fn expect_exception<T: std::fmt::Debug>(
    result: uniagent_core::Result<T>,
    class: ExceptionClass,
    what: &str,
) -> Result<RemoteException, Failure> {
    match result {
        Err(Error::Runtime { exception, .. }) if exception.class() == class => Ok(*exception),
        other => Err(Failure::Failed(format!(
            "{what}: expected {}, got {other:?}",
            class.class_path()
        ))),
    }
}

/// Runs `command` in `session` with `check` and a timeout.
pub(crate) async fn run(
    d: &dyn Deployment,
    session: &str,
    command: impl Into<String>,
    check: CheckMode,
    timeout: f64,
) -> uniagent_core::Result<uniagent_core::sandbox::BashObservation> {
    let action = BashAction {
        check,
        ..BashAction::new(session, command, Some(timeout))
    };
    d.run_in_session(Action::Bash(action)).await
}

/// Creates a session with a generous startup timeout.
pub(crate) async fn open_session(d: &dyn Deployment, name: &str) -> uniagent_core::Result<()> {
    let request = CreateSessionRequest {
        startup_timeout: 10.0,
        ..CreateSessionRequest::new(name)
    };
    d.create_session(request).await.map(|_| ())
}

/// Closes a session, ignoring errors (cleanup).
pub(crate) async fn close_quietly(d: &dyn Deployment, name: &str) {
    let _ = d
        .close_session(CloseSessionRequest {
            session: name.to_owned(),
            session_type: Default::default(),
        })
        .await;
}
