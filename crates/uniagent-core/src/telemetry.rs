//! The metrics the interaction loop and the runner emit, through the [`metrics`] facade.
//!
//! Core only *emits*: every counter, gauge and histogram below is recorded with the `metrics`
//! macros, which cost a few nanoseconds when no recorder is installed. A binary that wants a
//! Prometheus endpoint installs a recorder (the `uniagent` CLI does it with `--metrics-addr`);
//! an embedding service can install its own. [`describe`] registers the help texts.
//!
//! Labels are small fixed sets (environment, phase, exit reason, backend, tool, outcome) and
//! never task ids, rollout ids or prompts, so the number of series stays bounded.
//!
//! ```
//! use uniagent_core::telemetry::{self, MetricKind};
//! // Every name is in the catalogue, with its kind, unit suffix and help text.
//! let rollouts = telemetry::CATALOGUE.iter().find(|m| m.name == telemetry::ROLLOUTS_FINISHED);
//! assert_eq!(rollouts.map(|m| m.kind), Some(MetricKind::Counter));
//! ```

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge, histogram, Label};

use crate::agent::ExitReason;
use crate::error::{Error, ErrorKind};

/// Rollouts that got their permit and started, by environment and phase.
pub const ROLLOUTS_STARTED: &str = "uniagent_rollouts_started_total";
/// Rollouts that ended, by environment, phase, exit reason and success.
pub const ROLLOUTS_FINISHED: &str = "uniagent_rollouts_finished_total";
/// Rollouts running now, by environment and phase.
pub const ROLLOUTS_IN_FLIGHT: &str = "uniagent_rollouts_in_flight";
/// Wall time of one rollout, sandbox start to sandbox stop.
pub const ROLLOUT_SECONDS: &str = "uniagent_rollout_duration_seconds";
/// Sandboxes started, by backend.
pub const SANDBOX_STARTS: &str = "uniagent_sandbox_starts_total";
/// Time to start one sandbox (waiting for a start permit excluded), by backend.
pub const SANDBOX_START_SECONDS: &str = "uniagent_sandbox_start_seconds";
/// Sandbox failures by backend and class (`create`, `start`, `stop`, `stop_timeout`, `tool`).
pub const SANDBOX_FAILURES: &str = "uniagent_sandbox_failures_total";
/// Sandboxes started and not yet stopped, by backend.
pub const SANDBOXES_LIVE: &str = "uniagent_sandboxes_live";
/// Model calls of the loop (start, query, append), by outcome.
pub const MODEL_REQUESTS: &str = "uniagent_model_requests_total";
/// Time of one model query (waiting for a model permit included).
pub const MODEL_REQUEST_SECONDS: &str = "uniagent_model_request_seconds";
/// Failed model calls by error class.
pub const MODEL_ERRORS: &str = "uniagent_model_errors_total";
/// Tokens the policy sampled (generated), all rollouts together.
pub const MODEL_TOKENS_GENERATED: &str = "uniagent_model_tokens_generated_total";
/// Tool calls by tool and outcome (`ok`, `failed`, `timeout`, `error`, `cancelled`,
/// `malformed`; an unknown tool name counts as tool `unknown`).
pub const TOOL_CALLS: &str = "uniagent_tool_calls_total";
/// Time of one tool call, by tool.
pub const TOOL_CALL_SECONDS: &str = "uniagent_tool_call_seconds";
/// Time of one reward computation, by reward.
pub const REWARD_SECONDS: &str = "uniagent_reward_seconds";
/// Reward failures by reward and class (`error`, `timeout`, `non_finite`).
pub const REWARD_FAILURES: &str = "uniagent_reward_failures_total";

/// What kind of metric a catalogue entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up; Prometheus reads it with `rate()`.
    Counter,
    /// A value now.
    Gauge,
    /// A distribution (exported with buckets: `_bucket`, `_sum`, `_count`).
    Histogram,
}

/// One metric: its name, kind, labels and help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    /// The exported name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The label keys it carries.
    pub labels: &'static [&'static str],
    /// What it measures (the `# HELP` line).
    pub help: &'static str,
}

const fn def(
    name: &'static str,
    kind: MetricKind,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind,
        labels,
        help,
    }
}

use MetricKind::{Counter, Gauge, Histogram};

/// Every metric core emits.
pub const CATALOGUE: &[MetricDef] = &[
    def(
        ROLLOUTS_STARTED,
        Counter,
        &["environment", "phase"],
        "Rollouts started.",
    ),
    def(
        ROLLOUTS_FINISHED,
        Counter,
        &["environment", "phase", "exit_reason", "success"],
        "Rollouts ended, by exit reason and whether the reward says solved.",
    ),
    def(
        ROLLOUTS_IN_FLIGHT,
        Gauge,
        &["environment", "phase"],
        "Rollouts running now.",
    ),
    def(
        ROLLOUT_SECONDS,
        Histogram,
        &["environment", "phase"],
        "Wall time of one rollout, in seconds.",
    ),
    def(SANDBOX_STARTS, Counter, &["backend"], "Sandboxes started."),
    def(
        SANDBOX_START_SECONDS,
        Histogram,
        &["backend"],
        "Time to start one sandbox, in seconds.",
    ),
    def(
        SANDBOX_FAILURES,
        Counter,
        &["backend", "class"],
        "Sandbox failures by class (create, start, stop, stop_timeout, tool).",
    ),
    def(
        SANDBOXES_LIVE,
        Gauge,
        &["backend"],
        "Sandboxes started and not yet stopped.",
    ),
    def(
        MODEL_REQUESTS,
        Counter,
        &["outcome"],
        "Model calls of the agent loop.",
    ),
    def(
        MODEL_REQUEST_SECONDS,
        Histogram,
        &[],
        "Time of one model query, in seconds.",
    ),
    def(
        MODEL_ERRORS,
        Counter,
        &["class"],
        "Failed model calls by error class.",
    ),
    def(
        MODEL_TOKENS_GENERATED,
        Counter,
        &[],
        "Tokens sampled by the policy.",
    ),
    def(
        TOOL_CALLS,
        Counter,
        &["tool", "outcome"],
        "Tool calls by outcome.",
    ),
    def(
        TOOL_CALL_SECONDS,
        Histogram,
        &["tool"],
        "Time of one tool call, in seconds.",
    ),
    def(
        REWARD_SECONDS,
        Histogram,
        &["reward"],
        "Time of one reward computation, in seconds.",
    ),
    def(
        REWARD_FAILURES,
        Counter,
        &["reward", "class"],
        "Reward failures by class (error, timeout, non_finite).",
    ),
];

/// Registers the help text and unit of every metric in `catalogue` with the installed
/// recorder (call once after installing it; without a recorder this does nothing).
pub fn describe(catalogue: &[MetricDef]) {
    for m in catalogue {
        let unit = m
            .name
            .ends_with("_seconds")
            .then_some(metrics::Unit::Seconds);
        match (m.kind, unit) {
            (Counter, _) => metrics::describe_counter!(m.name, m.help),
            (Gauge, _) => metrics::describe_gauge!(m.name, m.help),
            (Histogram, Some(u)) => metrics::describe_histogram!(m.name, u, m.help),
            (Histogram, None) => metrics::describe_histogram!(m.name, m.help),
        }
    }
}

/// The labels of a run's rollout metrics: which environment, and which phase (`run`,
/// `train`, `eval`...). Cheap to clone.
///
/// ```
/// use uniagent_core::telemetry::RunLabels;
/// let labels = RunLabels::new("file-lookup", "eval");
/// assert_eq!(labels.environment(), "file-lookup");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLabels {
    environment: Arc<str>,
    phase: Arc<str>,
}

impl Default for RunLabels {
    fn default() -> Self {
        Self::new("unnamed", "run")
    }
}

impl RunLabels {
    /// Labels for `environment` in `phase`.
    pub fn new(environment: &str, phase: &str) -> Self {
        Self {
            environment: environment.into(),
            phase: phase.into(),
        }
    }

    /// The environment label.
    pub fn environment(&self) -> &str {
        &self.environment
    }

    /// The phase label.
    pub fn phase(&self) -> &str {
        &self.phase
    }

    fn labels(&self) -> Vec<Label> {
        vec![
            Label::new("environment", self.environment.to_string()),
            Label::new("phase", self.phase.to_string()),
        ]
    }

    /// Counts a started rollout; it is in flight until the guard drops (also on a panic).
    pub(crate) fn rollout_started(&self) -> InFlight {
        counter!(ROLLOUTS_STARTED, self.labels()).increment(1);
        gauge!(ROLLOUTS_IN_FLIGHT, self.labels()).increment(1.0);
        InFlight(self.clone())
    }

    /// Counts an ended rollout; `ran` is its wall time when it started at all.
    pub(crate) fn rollout_finished(&self, reason: ExitReason, success: bool, ran: Option<f64>) {
        let mut labels = self.labels();
        labels.push(Label::from_static_parts("exit_reason", reason.as_str()));
        labels.push(Label::from_static_parts(
            "success",
            if success { "true" } else { "false" },
        ));
        counter!(ROLLOUTS_FINISHED, labels).increment(1);
        if let Some(seconds) = ran {
            histogram!(ROLLOUT_SECONDS, self.labels()).record(seconds);
        }
    }
}

/// A rollout in flight: the gauge goes down when this drops.
#[derive(Debug)]
pub(crate) struct InFlight(RunLabels);

impl Drop for InFlight {
    fn drop(&mut self) {
        gauge!(ROLLOUTS_IN_FLIGHT, self.0.labels()).decrement(1.0);
    }
}

fn backend_label(backend: &str) -> Vec<Label> {
    vec![Label::new("backend", backend.to_owned())]
}

/// Counts a started sandbox; it is live until the guard drops.
pub(crate) fn sandbox_started(backend: &str, elapsed: Duration) -> LiveSandbox {
    counter!(SANDBOX_STARTS, backend_label(backend)).increment(1);
    histogram!(SANDBOX_START_SECONDS, backend_label(backend)).record(elapsed.as_secs_f64());
    gauge!(SANDBOXES_LIVE, backend_label(backend)).increment(1.0);
    LiveSandbox(backend.to_owned())
}

/// A started sandbox: the live gauge of its backend goes down when this drops.
#[derive(Debug)]
pub(crate) struct LiveSandbox(String);

impl Drop for LiveSandbox {
    fn drop(&mut self) {
        gauge!(SANDBOXES_LIVE, backend_label(&self.0)).decrement(1.0);
    }
}

pub(crate) fn sandbox_failed(backend: &str, class: &'static str) {
    let mut labels = backend_label(backend);
    labels.push(Label::from_static_parts("class", class));
    counter!(SANDBOX_FAILURES, labels).increment(1);
}

/// Counts one model call of the loop: `outcome` is `ok`, `error` (with the error),
/// `deadline` (the rollout's wall clock ran out) or `cancelled`.
pub(crate) fn model_call(outcome: &'static str, error: Option<&Error>) {
    if let Some(e) = error {
        counter!(MODEL_ERRORS, "class" => e.kind().as_str()).increment(1);
    }
    counter!(MODEL_REQUESTS, "outcome" => outcome).increment(1);
}

pub(crate) fn model_query_time(elapsed: Duration) {
    histogram!(MODEL_REQUEST_SECONDS).record(elapsed.as_secs_f64());
}

pub(crate) fn tokens_generated(n: u64) {
    counter!(MODEL_TOKENS_GENERATED).increment(n);
}

pub(crate) fn tool_call(tool: &str, outcome: &'static str, elapsed: Option<Duration>) {
    let labels = vec![
        Label::new("tool", tool.to_owned()),
        Label::from_static_parts("outcome", outcome),
    ];
    counter!(TOOL_CALLS, labels).increment(1);
    if let Some(d) = elapsed {
        histogram!(TOOL_CALL_SECONDS, "tool" => tool.to_owned()).record(d.as_secs_f64());
    }
}

pub(crate) fn reward_scored(reward: &str, elapsed: Duration, failure: Option<&'static str>) {
    histogram!(REWARD_SECONDS, "reward" => reward.to_owned()).record(elapsed.as_secs_f64());
    if let Some(class) = failure {
        let labels = vec![
            Label::new("reward", reward.to_owned()),
            Label::from_static_parts("class", class),
        ];
        counter!(REWARD_FAILURES, labels).increment(1);
    }
}

impl ErrorKind {
    /// The snake_case name, used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid_input",
            Self::Config => "config",
            Self::NotSupported => "not_supported",
            Self::NotFound => "not_found",
            Self::LimitExceeded => "limit_exceeded",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Protocol => "protocol",
            Self::CommandFailed => "command_failed",
            Self::Cancelled => "cancelled",
            Self::Internal => "internal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_names_are_unique_prometheus_names_with_conventional_suffixes() {
        let mut seen = std::collections::HashSet::new();
        for m in CATALOGUE {
            assert!(seen.insert(m.name), "{} twice", m.name);
            assert!(m.name.starts_with("uniagent_"), "{}", m.name);
            assert!(
                m.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                m.name
            );
            match m.kind {
                Counter => assert!(m.name.ends_with("_total"), "{}", m.name),
                Histogram => assert!(m.name.ends_with("_seconds"), "{}", m.name),
                Gauge => assert!(!m.name.ends_with("_total"), "{}", m.name),
            }
        }
    }
}
