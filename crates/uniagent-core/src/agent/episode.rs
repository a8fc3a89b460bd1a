//! One rollout in progress: what it runs under ([`Rollout`]), what it has gathered so far
//! ([`Episode`]), and how its waits end ([`race`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::LoopConfig;
use super::exit::ExitReason;
use super::interaction::RolloutControl;
use super::trajectory::{rollout_id, EpisodeCounts, PhaseTimings, Trajectory};
use crate::error::{Error, LengthLimitKind};
use crate::message::Message;
use crate::reward::RewardOutcome;
use crate::rollout::{AgentLoopMetrics, AgentLoopOutput};
use crate::sandbox::Deployment;
use crate::task::Task;
use crate::tool::EpisodeSignal;

/// What a rollout runs under, fixed for its whole life.
#[derive(Debug)]
pub(crate) struct Rollout<'a> {
    /// `<task id>:<sample>`.
    pub(crate) id: String,
    pub(crate) task: Arc<Task>,
    pub(crate) sample: u32,
    /// The started sandbox, if the rollout has one.
    pub(crate) deployment: Option<&'a Arc<dyn Deployment>>,
    pub(crate) control: &'a RolloutControl,
    pub(crate) started: Instant,
    /// The end of the wall-clock budget.
    pub(crate) deadline: Option<Instant>,
}

impl<'a> Rollout<'a> {
    /// Sample `sample` of `task`, starting now under `config`'s wall-clock budget, or the
    /// task's own limit ([`Task::time_limit`]) when that is shorter.
    pub(crate) fn start(
        task: Arc<Task>,
        sample: u32,
        deployment: Option<&'a Arc<dyn Deployment>>,
        control: &'a RolloutControl,
        config: &LoopConfig,
    ) -> Self {
        let started = Instant::now();
        // An invalid task limit is refused before the run (the CLI checks every task); here it
        // leaves the configured budget alone.
        let task_limit = task.time_limit().ok().flatten();
        let budget = match (config.wall_clock_budget, task_limit) {
            (Some(b), Some(t)) => Some(b.min(t)),
            (b, t) => b.or(t),
        };
        Self {
            id: rollout_id(&task.id, sample),
            task,
            sample,
            deployment,
            control,
            started,
            deadline: budget.map(|b| started + b),
        }
    }

    pub(crate) fn cancel(&self) -> &CancellationToken {
        &self.control.cancel
    }

    /// Whether the wall-clock budget is spent.
    pub(crate) fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Runs `fut` until it completes, the wall-clock budget ends or the rollout is cancelled.
    pub(crate) async fn race<T>(&self, fut: impl Future<Output = T>) -> Raced<T> {
        race(fut, self.deadline, self.cancel()).await
    }

    /// How long a tool may take now: the configured timeout, capped by what is left of the
    /// wall-clock budget.
    pub(crate) fn tool_timeout(&self, config: &LoopConfig) -> Duration {
        match self.deadline {
            Some(d) => config
                .tool_timeout
                .min(d.saturating_duration_since(Instant::now())),
            None => config.tool_timeout,
        }
    }
}

/// What a raced future turned into.
pub(crate) enum Raced<T> {
    Done(T),
    Deadline,
    Cancelled,
}

/// Runs `fut` until it completes, the deadline passes or the token is cancelled.
pub(crate) async fn race<T>(
    fut: impl Future<Output = T>,
    deadline: Option<Instant>,
    cancel: &CancellationToken,
) -> Raced<T> {
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        () = cancel.cancelled() => Raced::Cancelled,
        v = fut => Raced::Done(v),
        () = sleep => Raced::Deadline,
    }
}

/// What a rollout has gathered so far, besides its token state.
#[derive(Debug, Default)]
pub(crate) struct Episode {
    pub(crate) counts: EpisodeCounts,
    pub(crate) timings: PhaseTimings,
    pub(crate) signal: Option<EpisodeSignal>,
    pub(crate) error: Option<String>,
    /// Messages of the last turn that were not appended to the cache.
    pub(crate) tail: Vec<Message>,
}

impl Episode {
    /// Records `e` and returns `reason`.
    pub(crate) fn fail(&mut self, reason: ExitReason, e: &Error) -> ExitReason {
        self.error = Some(e.to_string());
        reason
    }

    /// Records a model-side error: length limits are budget endings, cancellation is
    /// cancellation, anything else is a model error.
    pub(crate) fn model_failure(&mut self, e: Error) -> ExitReason {
        let reason = match &e {
            Error::LengthLimit {
                limit: LengthLimitKind::MaxResponseLen,
                ..
            } => ExitReason::TokenLimit,
            Error::LengthLimit { .. } => ExitReason::ContextOverflow,
            Error::Cancelled { .. } => ExitReason::Cancelled,
            _ => ExitReason::ModelError,
        };
        self.fail(reason, &e)
    }

    /// The episode as a trajectory: `output` is the token state, `messages` the whole
    /// conversation, `masked` whether it is kept out of training.
    pub(crate) fn into_trajectory(
        mut self,
        rollout: &Rollout<'_>,
        mut output: AgentLoopOutput,
        messages: Vec<Message>,
        ending: (ExitReason, Option<RewardOutcome>),
        masked: bool,
    ) -> Trajectory {
        let (reason, reward) = ending;
        output.reward_score = reward.as_ref().map(|r| r.score);
        output.metrics = AgentLoopMetrics {
            generate_sequences: self.timings.model,
            tool_calls: self.timings.tools,
            compute_score: self.timings.reward,
            num_preempted: -1,
        };
        self.timings.total = rollout.started.elapsed().as_secs_f64();
        let mut t = Trajectory {
            id: rollout.id.clone(),
            task_id: rollout.task.id.clone(),
            sample: rollout.sample,
            exit_reason: reason,
            masked,
            error: self.error,
            reward,
            signal: self.signal,
            counts: self.counts,
            timings: self.timings,
            output,
            messages,
        };
        t.set_exit(reason, masked);
        t
    }
}
