//! [`Runner`]: many tasks × samples through one [`AgentInteraction`], concurrently, with a
//! sandbox per rollout, permits per resource, cancellation and isolation of failures.
//!
//! Each rollout: wait for a rollout permit → create its sandbox from the [`SandboxFactory`] and
//! start it under a sandbox-start permit → run the loop (model calls under model-call permits)
//! → reward (inside the loop's run, while the sandbox is up) → stop the sandbox, always, also
//! after a panic or a cancel. One rollout's error or panic becomes its own trajectory's exit
//! reason; the batch goes on. Progress is reported as [`ProgressEvent`]s (binaries draw bars).

mod parts;
mod sink;
#[cfg(feature = "codec")]
mod source;
mod summary;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use parts::RolloutParts;
pub use sink::{JsonlSink, TrajectorySink};
#[cfg(feature = "codec")]
pub use source::{RolloutPhase, RolloutSource};
pub use summary::{PhaseStats, Stat, Summary, SummaryBuilder};

use crate::agent::{AgentInteraction, CancellationToken, ExitReason, RolloutControl, Trajectory};
use crate::error::{Error, Result};
use crate::retry::duration_secs;
use crate::sandbox::Deployment;
use crate::task::Task;
use crate::telemetry::{self, RunLabels};

/// Creates the sandbox of one rollout (not yet started).
pub trait SandboxFactory: Send + Sync + 'static {
    /// A new, unstarted sandbox for `task`.
    fn create(&self, task: &Task) -> Result<Box<dyn Deployment>>;
}

impl<F> SandboxFactory for F
where
    F: Fn(&Task) -> Result<Box<dyn Deployment>> + Send + Sync + 'static,
{
    fn create(&self, task: &Task) -> Result<Box<dyn Deployment>> {
        self(task)
    }
}

/// Concurrency and repetition of a run.
///
/// ```
/// use uniagent_core::runner::RunnerConfig;
/// let cfg: RunnerConfig = serde_json::from_str(r#"{"samples_per_task": 8, "max_concurrent_rollouts": 256}"#).unwrap();
/// assert_eq!(cfg.max_concurrent_sandbox_starts, 16);
/// assert!(serde_json::from_str::<RunnerConfig>(r#"{"samples": 8}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerConfig {
    /// Rollouts per task (the GRPO group size).
    pub samples_per_task: u32,
    /// Rollouts in flight at once (each holds a sandbox).
    pub max_concurrent_rollouts: usize,
    /// Model calls in flight at once, across rollouts.
    pub max_concurrent_model_calls: usize,
    /// Sandboxes starting at once.
    pub max_concurrent_sandbox_starts: usize,
    /// How long stopping one sandbox may take before it is abandoned (its `Drop` still runs).
    #[serde(with = "duration_secs")]
    pub sandbox_stop_timeout: Duration,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            samples_per_task: 1,
            max_concurrent_rollouts: 64,
            max_concurrent_model_calls: 64,
            max_concurrent_sandbox_starts: 16,
            sandbox_stop_timeout: Duration::from_secs(60),
        }
    }
}

impl RunnerConfig {
    /// Checks ranges; the message names the bad field.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("samples_per_task", self.samples_per_task as usize),
            ("max_concurrent_rollouts", self.max_concurrent_rollouts),
            (
                "max_concurrent_model_calls",
                self.max_concurrent_model_calls,
            ),
            (
                "max_concurrent_sandbox_starts",
                self.max_concurrent_sandbox_starts,
            ),
        ] {
            if v == 0 || v > Semaphore::MAX_PERMITS {
                return Err(Error::Config {
                    message: format!("runner.{name} must be >= 1, got {v}"),
                    source: None,
                });
            }
        }
        Ok(())
    }
}

/// What the runner reports while it works.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressEvent {
    /// A rollout got its permit and starts.
    Started {
        /// Rollout id.
        id: String,
    },
    /// A rollout ended (every rollout ends exactly once, also when cancelled before starting).
    Finished {
        /// Rollout id.
        id: String,
        /// How it ended.
        exit_reason: ExitReason,
        /// Whether its reward says solved.
        success: bool,
    },
}

type ProgressFn = Arc<dyn Fn(&ProgressEvent) + Send + Sync>;

/// Runs tasks through an [`AgentInteraction`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::sync::Arc;
/// use uniagent_core::agent::{AgentInteraction, CancellationToken, ExitReason, LoopConfig};
/// use uniagent_core::runner::{Runner, RunnerConfig};
/// use uniagent_core::testing::{ScriptedChatModel, ScriptedTurn};
/// use uniagent_core::{Message, Task};
///
/// let model = ScriptedChatModel::new(vec![ScriptedTurn::Reply(Message::assistant("hi"))]);
/// let cfg = LoopConfig { chat_mode: true, ..LoopConfig::default() };
/// let agent = AgentInteraction::new(Arc::new(model), vec![], cfg)?;
/// let runner = Runner::new(agent, RunnerConfig { samples_per_task: 3, ..RunnerConfig::default() })?;
/// let mut out = Vec::new();
/// let tasks = vec![Task::new("a", vec![Message::user("hello")])];
/// let summary = runner.run(tasks, &CancellationToken::new(), &mut out).await?;
/// assert_eq!(summary.exit_reasons[&ExitReason::Finished], 3);
/// assert_eq!(out.len(), 3);
/// # Ok(()) }
/// ```
pub struct Runner {
    agent: Arc<AgentInteraction>,
    sandboxes: Option<Arc<dyn SandboxFactory>>,
    config: RunnerConfig,
    progress: Option<ProgressFn>,
    labels: RunLabels,
    start_permits: Option<Arc<Semaphore>>,
}

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("agent", &self.agent)
            .field("sandboxes", &self.sandboxes.is_some())
            .field("config", &self.config)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// Shared state of one run, cloned into every rollout task.
#[derive(Clone)]
struct RunShared {
    agent: Arc<AgentInteraction>,
    sandboxes: Option<Arc<dyn SandboxFactory>>,
    control: RolloutControl,
    rollout_permits: Arc<Semaphore>,
    start_permits: Arc<Semaphore>,
    stop_timeout: Duration,
    progress: Option<ProgressFn>,
    labels: RunLabels,
}

impl Runner {
    /// A runner without sandboxes (tools that need none, or bring their own).
    pub fn new(agent: AgentInteraction, config: RunnerConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            agent: Arc::new(agent),
            sandboxes: None,
            config,
            progress: None,
            labels: RunLabels::default(),
            start_permits: None,
        })
    }

    /// Gives every rollout its own sandbox from `factory`.
    pub fn with_sandboxes(mut self, factory: impl SandboxFactory) -> Self {
        self.sandboxes = Some(Arc::new(factory));
        self
    }

    /// Calls `progress` on every [`ProgressEvent`] (from the runner's task; keep it cheap).
    pub fn with_progress(
        mut self,
        progress: impl Fn(&ProgressEvent) + Send + Sync + 'static,
    ) -> Self {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// Labels this run's rollout metrics (see [`crate::telemetry`]) with an environment and a
    /// phase; without it they read `unnamed` / `run`.
    pub fn with_labels(mut self, labels: RunLabels) -> Self {
        self.labels = labels;
        self
    }

    /// Takes sandbox-start permits from `permits` instead of a semaphore of its own with
    /// `max_concurrent_sandbox_starts`: runners that run side by side (a rollout service's
    /// requests, each with its own runner) then start at most that many sandboxes together.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use uniagent_core::runner::Runner;
    ///
    /// fn side_by_side(runners: Vec<Runner>) -> Vec<Runner> {
    ///     let starts = Arc::new(tokio::sync::Semaphore::new(8));
    ///     runners
    ///         .into_iter()
    ///         .map(|r| r.with_start_permits(Arc::clone(&starts)))
    ///         .collect()
    /// }
    /// # let _ = side_by_side;
    /// ```
    pub fn with_start_permits(mut self, permits: Arc<Semaphore>) -> Self {
        self.start_permits = Some(permits);
        self
    }

    /// Runs every task `samples_per_task` times and writes each trajectory to `sink` as it
    /// finishes. Cancelling `cancel` ends running rollouts as [`ExitReason::Cancelled`] (their
    /// sandboxes are stopped) and records queued ones as cancelled without starting them.
    ///
    /// Fails only when the sink fails; the run is then cancelled and drained first, so no
    /// sandbox outlives it.
    pub async fn run(
        &self,
        tasks: Vec<Task>,
        cancel: &CancellationToken,
        sink: &mut dyn TrajectorySink,
    ) -> Result<Summary> {
        let started = Instant::now();
        let shared = RunShared {
            agent: Arc::clone(&self.agent),
            sandboxes: self.sandboxes.clone(),
            control: RolloutControl {
                cancel: cancel.clone(),
                model_permits: Some(Arc::new(Semaphore::new(
                    self.config.max_concurrent_model_calls,
                ))),
            },
            rollout_permits: Arc::new(Semaphore::new(self.config.max_concurrent_rollouts)),
            start_permits: self.start_permits.clone().unwrap_or_else(|| {
                Arc::new(Semaphore::new(self.config.max_concurrent_sandbox_starts))
            }),
            stop_timeout: self.config.sandbox_stop_timeout,
            progress: self.progress.clone(),
            labels: self.labels.clone(),
        };
        let mut set = JoinSet::new();
        let mut pending = HashMap::new();
        for task in tasks {
            let task = Arc::new(task);
            for sample in 0..self.config.samples_per_task {
                let handle = set.spawn(rollout(shared.clone(), Arc::clone(&task), sample));
                pending.insert(handle.id(), (Arc::clone(&task), sample));
            }
        }
        let mut summary = SummaryBuilder::new();
        let mut sink_error = None;
        while let Some(joined) = set.join_next_with_id().await {
            let trajectory = match joined {
                Ok((id, t)) => {
                    pending.remove(&id);
                    t
                }
                Err(e) => {
                    let Some((task, sample)) = pending.remove(&e.id()) else {
                        continue;
                    };
                    let message = panic_message(e);
                    let t = Trajectory::empty(
                        &task.id,
                        sample,
                        task.messages.clone(),
                        ExitReason::InternalError,
                        Some(message),
                    );
                    emit(&shared.progress, finished_event(&t));
                    shared.labels.rollout_finished(t.exit_reason, false, None);
                    t
                }
            };
            summary.add(&trajectory);
            if sink_error.is_none() {
                if let Err(e) = sink.write(&trajectory) {
                    cancel.cancel();
                    sink_error = Some(e);
                }
            }
        }
        if let Some(e) = sink_error {
            return Err(e);
        }
        sink.flush()?;
        Ok(summary.summary(started.elapsed()))
    }
}

fn emit(progress: &Option<ProgressFn>, event: ProgressEvent) {
    if let Some(p) = progress {
        p(&event);
    }
}

fn finished_event(t: &Trajectory) -> ProgressEvent {
    ProgressEvent::Finished {
        id: t.id.clone(),
        exit_reason: t.exit_reason,
        success: t.is_success(),
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    if e.is_cancelled() {
        return "rollout task was cancelled".to_owned();
    }
    let payload = e.into_panic();
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    format!("rollout panicked: {text}")
}

async fn stop_sandbox(d: &Arc<dyn Deployment>, timeout: Duration) -> Option<String> {
    match tokio::time::timeout(timeout, d.stop()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => {
            telemetry::sandbox_failed(d.backend(), "stop");
            Some(format!("stopping the sandbox failed: {e}"))
        }
        Err(_) => {
            telemetry::sandbox_failed(d.backend(), "stop_timeout");
            Some(format!("stopping the sandbox timed out after {timeout:?}"))
        }
    }
}

/// One rollout, start to end. Panics inside the loop are caught here so the sandbox is stopped.
async fn rollout(shared: RunShared, task: Arc<Task>, sample: u32) -> Trajectory {
    let cancel = &shared.control.cancel;
    let empty =
        |reason, error| Trajectory::empty(&task.id, sample, task.messages.clone(), reason, error);
    let done = |t: Trajectory, ran: Option<f64>| {
        emit(&shared.progress, finished_event(&t));
        shared
            .labels
            .rollout_finished(t.exit_reason, t.is_success(), ran);
        t
    };
    let _permit = tokio::select! {
        biased;
        () = cancel.cancelled() => return done(empty(ExitReason::Cancelled, None), None),
        p = shared.rollout_permits.acquire() => match p {
            Ok(p) => p,
            Err(_) => return done(empty(ExitReason::Cancelled, Some("rollout permits closed".into())), None),
        },
    };
    let started = Instant::now();
    let _in_flight = shared.labels.rollout_started();
    emit(
        &shared.progress,
        ProgressEvent::Started {
            id: crate::agent::rollout_id(&task.id, sample),
        },
    );
    let deployment = match &shared.sandboxes {
        None => None,
        Some(factory) => {
            let d: Arc<dyn Deployment> = match factory.create(&task) {
                Ok(d) => Arc::from(d),
                Err(e) => {
                    telemetry::sandbox_failed("unknown", "create");
                    let t = empty(
                        ExitReason::SandboxError,
                        Some(format!("creating the sandbox failed: {e}")),
                    );
                    return done(t, Some(started.elapsed().as_secs_f64()));
                }
            };
            let start = async {
                let _p = shared.start_permits.acquire().await;
                let t0 = Instant::now();
                match d.start().await {
                    Ok(()) => Ok(telemetry::sandbox_started(d.backend(), t0.elapsed())),
                    Err(e) => {
                        telemetry::sandbox_failed(d.backend(), "start");
                        Err(e)
                    }
                }
            };
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => Err((ExitReason::Cancelled, None)),
                r = start => r.map_err(|e| (ExitReason::SandboxError, Some(format!("starting the sandbox failed: {e}")))),
            };
            match outcome {
                Ok(live) => Some((d, live)),
                Err((reason, error)) => {
                    let stop_error = stop_sandbox(&d, shared.stop_timeout).await;
                    let mut t = empty(reason, error.or(stop_error));
                    t.timings.total = started.elapsed().as_secs_f64();
                    let ran = Some(t.timings.total);
                    return done(t, ran);
                }
            }
        }
    };
    // The live-sandbox gauge goes down when `live` drops: after the stop below, or when this
    // rollout is dropped mid-way (its sandbox's own `Drop` cleans up then).
    let (deployment, live) = deployment.unzip();
    let sandbox_start = started.elapsed().as_secs_f64();
    let agent = Arc::clone(&shared.agent);
    let control = shared.control.clone();
    let (run_task, run_deployment) = (Arc::clone(&task), deployment.clone());
    let handle =
        tokio::spawn(async move { agent.run(run_task, sample, run_deployment, &control).await });
    let mut t = match handle.await {
        Ok(t) => t,
        Err(e) => empty(ExitReason::InternalError, Some(panic_message(e))),
    };
    if let Some(d) = &deployment {
        let t0 = Instant::now();
        if let Some(stop_error) = stop_sandbox(d, shared.stop_timeout).await {
            t.error.get_or_insert(stop_error);
        }
        t.timings.sandbox_stop = t0.elapsed().as_secs_f64();
    }
    drop(live);
    t.timings.sandbox_start += sandbox_start;
    t.timings.total = started.elapsed().as_secs_f64();
    let ran = Some(t.timings.total);
    done(t, ran)
}
