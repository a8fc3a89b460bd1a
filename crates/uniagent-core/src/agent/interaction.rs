//! [`AgentInteraction`]: the ReAct loop. Query the model, run its tool calls in order, append
//! the observations, repeat until the agent finishes or a limit ends the episode; then score it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::config::LoopConfig;
use super::exit::ExitReason;
use super::trajectory::{rollout_id, EpisodeCounts, PhaseTimings, Trajectory};
use super::turn::{execute_calls, TurnOutcome};
use crate::error::{Error, LengthLimitKind, Result};
use crate::message::{Message, ToolSpec};
use crate::model::{ChatModel, FinishReason};
use crate::reward::{RewardContext, RewardOutcome, RewardSpec};
use crate::rollout::{AgentLoopMetrics, RolloutCache};
use crate::sandbox::{CreateSessionRequest, Deployment};
use crate::task::Task;
use crate::tool::{EpisodeSignal, Tool};
use tokio_util::sync::CancellationToken;

/// Shared handles a rollout runs under: cancellation and the model-call permits of the run.
#[derive(Debug, Clone, Default)]
pub struct RolloutControl {
    /// Cancels the rollout (and every other rollout holding a clone).
    pub cancel: CancellationToken,
    /// At most this many model calls run at once across the rollouts sharing it.
    pub model_permits: Option<Arc<Semaphore>>,
}

/// The tools of an interaction, looked up by name.
#[derive(Debug, Clone)]
pub(crate) struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
    specs: Vec<ToolSpec>,
    index: HashMap<String, usize>,
    sorted_names: Vec<String>,
}

impl ToolSet {
    fn new(tools: Vec<Arc<dyn Tool>>) -> Result<Self> {
        let specs: Vec<ToolSpec> = tools.iter().map(|t| t.spec()).collect();
        let mut index = HashMap::new();
        for (i, spec) in specs.iter().enumerate() {
            if index.insert(spec.name().to_owned(), i).is_some() {
                return Err(Error::Config {
                    message: format!("two tools are named `{}`", spec.name()),
                    source: None,
                });
            }
        }
        let mut sorted_names: Vec<String> = index.keys().cloned().collect();
        sorted_names.sort();
        Ok(Self {
            tools,
            specs,
            index,
            sorted_names,
        })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    pub(crate) fn sorted_names(&self) -> &[String] {
        &self.sorted_names
    }
}

/// The ReAct loop over a [`ChatModel`], a set of [`Tool`]s, an optional sandbox and an optional
/// [`RewardSpec`]. One instance serves any number of concurrent rollouts.
///
/// Semantics (Uni-Agent's, with its known bugs fixed):
/// - the turn limit is checked *before* querying, so a finish or submit on the last allowed
///   turn ends the episode as [`ExitReason::Finished`] / [`ExitReason::Submitted`];
/// - every tool call of a turn runs, in order; a malformed call (unknown function, arguments
///   that are not an object) gets an error message the model sees while the valid calls of the
///   same turn still run; a turn without any call is a format error outside chat mode;
/// - a tool's timeout is always shorter than the deadline the loop waits for it
///   ([`LoopConfig::tool_transport_margin`]); both count against the timeout budget;
/// - length limits are checked before the model is called and never truncate the prompt; a turn
///   cut by the budget is masked out ([`LoopConfig::mask_truncated_turn`]);
/// - when the episode ends, the last observations go into the message record but not into the
///   token trace, so the trajectory ends on the last sampled token;
/// - the reward runs after the loop and before the sandbox stops; without a reward spec the
///   reward is absent (no sentinel value).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::sync::Arc;
/// use serde_json::json;
/// use uniagent_core::agent::{AgentInteraction, ExitReason, LoopConfig, RolloutControl};
/// use uniagent_core::testing::{RecordingTool, ScriptedChatModel, ScriptedTurn};
/// use uniagent_core::{EpisodeSignal, Message, Task, ToolCall, ToolOutput};
///
/// let finish = RecordingTool::new("finish", |args| {
///     let answer = args["answer"].as_str().unwrap_or_default().to_owned();
///     Ok(ToolOutput::success("done").with_signal(EpisodeSignal::Finish { answer }))
/// });
/// let model = ScriptedChatModel::new(vec![ScriptedTurn::Reply(Message::assistant_with_calls(
///     None,
///     vec![ToolCall::new("c0", "finish", json!({"answer": "4"}))],
/// ))]);
/// let agent = AgentInteraction::new(Arc::new(model), vec![Arc::new(finish)], LoopConfig::default())?;
/// let task = Arc::new(Task::new("sum", vec![Message::user("2 + 2?")]));
/// let traj = agent.run(task, 0, None, &RolloutControl::default()).await;
/// assert_eq!(traj.exit_reason, ExitReason::Finished);
/// assert_eq!(traj.counts.turns, 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AgentInteraction {
    model: Arc<dyn ChatModel>,
    tools: ToolSet,
    reward: Option<Arc<dyn RewardSpec>>,
    config: Arc<LoopConfig>,
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

/// Mutable state of one episode.
#[derive(Debug, Default)]
pub(crate) struct Episode {
    pub(crate) counts: EpisodeCounts,
    pub(crate) timings: PhaseTimings,
    pub(crate) signal: Option<EpisodeSignal>,
    pub(crate) error: Option<String>,
    /// Messages of the last turn that were not appended to the cache.
    pub(crate) tail: Vec<Message>,
}

impl AgentInteraction {
    /// An interaction over `model` and `tools`. Fails if the configuration is invalid or two
    /// tools share a name.
    pub fn new(
        model: Arc<dyn ChatModel>,
        tools: Vec<Arc<dyn Tool>>,
        config: LoopConfig,
    ) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            model,
            tools: ToolSet::new(tools)?,
            reward: None,
            config: Arc::new(config),
        })
    }

    /// Scores every trajectory with `reward` after its loop ends.
    pub fn with_reward(mut self, reward: Arc<dyn RewardSpec>) -> Self {
        self.reward = Some(reward);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &LoopConfig {
        &self.config
    }

    /// The tool specs offered to the model.
    pub fn tool_specs(&self) -> &[ToolSpec] {
        &self.tools.specs
    }

    /// Runs sample `sample` of `task` to the end and scores it. `deployment` must be started;
    /// the caller stops it afterwards. Never fails: every ending is an [`ExitReason`].
    pub async fn run(
        &self,
        task: Arc<Task>,
        sample: u32,
        deployment: Option<Arc<dyn Deployment>>,
        control: &RolloutControl,
    ) -> Trajectory {
        let started = Instant::now();
        let id = rollout_id(&task.id, sample);
        let deadline = self.config.wall_clock_budget.map(|b| started + b);
        let mut ep = Episode::default();
        let mut cache = None;
        let reason = self
            .drive(
                &id,
                &task,
                deployment.as_ref(),
                control,
                deadline,
                &mut ep,
                &mut cache,
            )
            .await;
        let mut cache = cache
            .unwrap_or_else(|| RolloutCache::messages_only(&id, task.messages.clone(), Vec::new()));
        let mut messages = cache.messages().to_vec();
        messages.append(&mut ep.tail);
        let (reason, reward) = self
            .score(
                reason,
                &task,
                &messages,
                deployment.as_ref(),
                control,
                &mut ep,
            )
            .await;
        self.finish(
            &task, sample, &mut cache, messages, reason, reward, ep, started,
        )
    }

    #[allow(clippy::too_many_arguments)]
    async fn drive(
        &self,
        id: &str,
        task: &Arc<Task>,
        deployment: Option<&Arc<dyn Deployment>>,
        control: &RolloutControl,
        deadline: Option<Instant>,
        ep: &mut Episode,
        slot: &mut Option<RolloutCache>,
    ) -> ExitReason {
        let cancel = &control.cancel;
        if let (Some(d), true) = (deployment, self.config.create_session) {
            let t0 = Instant::now();
            let created = race(
                d.create_session(CreateSessionRequest::new(&self.config.session)),
                deadline,
                cancel,
            )
            .await;
            ep.timings.sandbox_start += t0.elapsed().as_secs_f64();
            match created {
                Raced::Done(Ok(_)) => {}
                Raced::Done(Err(e)) => return fail(ep, ExitReason::SandboxError, &e),
                Raced::Deadline => return ExitReason::WallClockTimeout,
                Raced::Cancelled => return ExitReason::Cancelled,
            }
        }
        let t0 = Instant::now();
        let started = race(
            self.model
                .start(id, task.messages.clone(), self.tools.specs.clone()),
            deadline,
            cancel,
        )
        .await;
        ep.timings.model += t0.elapsed().as_secs_f64();
        let mut cache = match started {
            Raced::Done(Ok(c)) => c,
            Raced::Done(Err(e)) => return model_failure(ep, e),
            Raced::Deadline => return ExitReason::WallClockTimeout,
            Raced::Cancelled => return ExitReason::Cancelled,
        };
        let restricted = cache.restrict_limits(self.config.limits);
        let cache = slot.insert(cache);
        if let Err(e) = restricted {
            return model_failure(ep, e);
        }
        loop {
            if cancel.is_cancelled() {
                return ExitReason::Cancelled;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return ExitReason::WallClockTimeout;
            }
            if cache.assistant_turns() >= self.config.max_turns {
                return ExitReason::MaxTurns;
            }
            let t0 = Instant::now();
            let query = async {
                let _permit = match &control.model_permits {
                    Some(s) => Some(s.acquire().await.map_err(|_| Error::Cancelled {
                        reason: "model permits closed".into(),
                    })?),
                    None => None,
                };
                self.model.query(cache, &self.config.sampling).await
            };
            let queried = race(query, deadline, cancel).await;
            ep.timings.model += t0.elapsed().as_secs_f64();
            let turn = match queried {
                Raced::Done(Ok(t)) => t,
                Raced::Done(Err(e)) => return model_failure(ep, e),
                Raced::Deadline => return ExitReason::WallClockTimeout,
                Raced::Cancelled => return ExitReason::Cancelled,
            };
            ep.counts.turns = cache.assistant_turns();
            ep.counts.sampled_tokens += turn.sampled_tokens as u64;
            if turn.finish_reason == FinishReason::Length {
                if let Err(e) = cache.generation_budget(None) {
                    if self.config.mask_truncated_turn {
                        cache.mask_out_turn(cache.assistant_turns().saturating_sub(1));
                    }
                    return model_failure(ep, e);
                }
            }
            let observations =
                match execute_calls(self, id, task, deployment, control, deadline, &turn, ep).await
                {
                    TurnOutcome::Continue(obs) => obs,
                    TurnOutcome::End(reason, obs) => {
                        ep.tail = obs;
                        return reason;
                    }
                };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                ep.tail = observations;
                return ExitReason::WallClockTimeout;
            }
            let t0 = Instant::now();
            let appended = race(
                self.model.append(cache, observations.clone()),
                deadline,
                cancel,
            )
            .await;
            ep.timings.model += t0.elapsed().as_secs_f64();
            match appended {
                Raced::Done(Ok(())) => {}
                Raced::Done(Err(e)) => {
                    ep.tail = observations;
                    return model_failure(ep, e);
                }
                Raced::Deadline => {
                    ep.tail = observations;
                    return ExitReason::WallClockTimeout;
                }
                Raced::Cancelled => return ExitReason::Cancelled,
            }
        }
    }

    pub(crate) fn tools(&self) -> &ToolSet {
        &self.tools
    }

    pub(crate) fn loop_config(&self) -> &LoopConfig {
        &self.config
    }

    async fn score(
        &self,
        reason: ExitReason,
        task: &Task,
        messages: &[Message],
        deployment: Option<&Arc<dyn Deployment>>,
        control: &RolloutControl,
        ep: &mut Episode,
    ) -> (ExitReason, Option<RewardOutcome>) {
        let Some(reward) = &self.reward else {
            return (reason, None);
        };
        if !reason.allows_reward() || control.cancel.is_cancelled() {
            return (reason, None);
        }
        let ctx = RewardContext {
            task,
            messages,
            signal: ep.signal.as_ref(),
            deployment,
        };
        let t0 = Instant::now();
        let deadline = self.config.reward_timeout.map(|d| t0 + d);
        let scored = race(reward.score(&ctx), deadline, &control.cancel).await;
        ep.timings.reward = t0.elapsed().as_secs_f64();
        let failure = match scored {
            Raced::Done(Ok(outcome)) if outcome.score.is_finite() => {
                return (reason, Some(outcome))
            }
            Raced::Done(Ok(outcome)) => {
                format!(
                    "reward `{}` returned a non-finite score {}",
                    reward.name(),
                    outcome.score
                )
            }
            Raced::Done(Err(e)) => e.to_string(),
            Raced::Deadline => {
                format!(
                    "reward `{}` timed out after {:?}",
                    reward.name(),
                    self.config.reward_timeout.unwrap_or_default()
                )
            }
            Raced::Cancelled => return (ExitReason::Cancelled, None),
        };
        if ep.error.is_none() {
            ep.error = Some(failure);
        }
        // An infrastructure ending stays what it was; a normal ending becomes a reward error.
        let reason = if reason.is_infrastructure() {
            reason
        } else {
            ExitReason::RewardError
        };
        (reason, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        task: &Task,
        sample: u32,
        cache: &mut RolloutCache,
        messages: Vec<Message>,
        reason: ExitReason,
        reward: Option<RewardOutcome>,
        mut ep: Episode,
        started: Instant,
    ) -> Trajectory {
        let mut output = cache.to_agent_loop_output();
        // Recorded for inspection only: a failed render leaves the trajectory as it is.
        output.rerender_ids = self.model.rerender_ids(cache).unwrap_or_else(|e| {
            tracing::warn!(
                rollout = cache.id(),
                "full re-render for the record failed: {e}"
            );
            None
        });
        let nothing_sampled = !output.response_mask.contains(&1);
        let masked = self.config.mask.masks(reason) || nothing_sampled;
        output.reward_score = reward.as_ref().map(|r| r.score);
        output.metrics = AgentLoopMetrics {
            generate_sequences: ep.timings.model,
            tool_calls: ep.timings.tools,
            compute_score: ep.timings.reward,
            num_preempted: -1,
        };
        ep.timings.total = started.elapsed().as_secs_f64();
        let mut t = Trajectory {
            id: cache.id().to_owned(),
            task_id: task.id.clone(),
            sample,
            exit_reason: reason,
            masked,
            error: ep.error,
            reward,
            signal: ep.signal,
            counts: ep.counts,
            timings: ep.timings,
            output,
            messages,
        };
        t.set_exit(reason, masked);
        t
    }
}

/// Records `e` and returns `reason`.
pub(crate) fn fail(ep: &mut Episode, reason: ExitReason, e: &Error) -> ExitReason {
    ep.error = Some(e.to_string());
    reason
}

/// Maps a model-side error to an exit reason: length limits are budget endings, cancellation is
/// cancellation, anything else is a model error.
fn model_failure(ep: &mut Episode, e: Error) -> ExitReason {
    let reason = match &e {
        Error::LengthLimit {
            limit: LengthLimitKind::MaxResponseLen,
            ..
        } => ExitReason::TokenLimit,
        Error::LengthLimit { .. } => ExitReason::ContextOverflow,
        Error::Cancelled { .. } => ExitReason::Cancelled,
        _ => ExitReason::ModelError,
    };
    fail(ep, reason, &e)
}

/// How long a tool may take now: the configured timeout, capped by what is left of the
/// wall-clock budget.
pub(crate) fn tool_timeout(config: &LoopConfig, deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => config
            .tool_timeout
            .min(d.saturating_duration_since(Instant::now())),
        None => config.tool_timeout,
    }
}
