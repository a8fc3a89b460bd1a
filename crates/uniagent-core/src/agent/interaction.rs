//! [`AgentInteraction`]: the ReAct loop. Query the model, run its tool calls in order, append
//! the observations, repeat until the agent finishes or a limit ends the episode; then score it.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::LoopConfig;
use super::episode::{race, Episode, Raced, Rollout};
use super::exit::ExitReason;
use super::trajectory::Trajectory;
use super::turn::{execute_calls, TurnOutcome};
use crate::error::{Error, Result};
use crate::message::{Message, ToolSpec};
use crate::model::{AssistantTurn, ChatModel, FinishReason};
use crate::reward::{RewardContext, RewardOutcome, RewardSpec};
use crate::rollout::{AgentLoopOutput, RolloutCache};
use crate::sandbox::{CreateSessionRequest, Deployment};
use crate::task::Task;
use crate::telemetry;
use crate::tool::Tool;

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
        let rollout = Rollout::start(task, sample, deployment.as_ref(), control, &self.config);
        let mut ep = Episode::default();
        let (reason, mut cache) = match self.start(&rollout, &mut ep).await {
            Ok(mut cache) => (self.turns(&rollout, &mut cache, &mut ep).await, cache),
            Err(reason) => {
                let messages = rollout.task.messages.clone();
                let cache = RolloutCache::messages_only(&rollout.id, messages, Vec::new());
                (reason, cache)
            }
        };
        let mut messages = cache.messages().to_vec();
        messages.append(&mut ep.tail);
        let ending = self.score(&rollout, reason, &messages, &mut ep).await;
        let output = self.output(&mut cache);
        let nothing_sampled = !output.response_mask.contains(&1);
        let masked = self.config.mask.masks(ending.0) || nothing_sampled;
        ep.into_trajectory(&rollout, output, messages, ending, masked)
    }

    /// Opens the sandbox session (if configured) and starts the model's cache; `Err` is how
    /// the rollout ended before it had one.
    async fn start(
        &self,
        rollout: &Rollout<'_>,
        ep: &mut Episode,
    ) -> std::result::Result<RolloutCache, ExitReason> {
        if let (Some(d), true) = (rollout.deployment, self.config.create_session) {
            let t0 = Instant::now();
            let created = rollout
                .race(d.create_session(CreateSessionRequest::new(&self.config.session)))
                .await;
            ep.timings.sandbox_start += t0.elapsed().as_secs_f64();
            match created {
                Raced::Done(Ok(_)) => {}
                Raced::Done(Err(e)) => return Err(ep.fail(ExitReason::SandboxError, &e)),
                Raced::Deadline => return Err(ExitReason::WallClockTimeout),
                Raced::Cancelled => return Err(ExitReason::Cancelled),
            }
        }
        let t0 = Instant::now();
        let messages = rollout.task.messages.clone();
        let started = rollout
            .race(
                self.model
                    .start(&rollout.id, messages, self.tools.specs.clone()),
            )
            .await;
        ep.timings.model += t0.elapsed().as_secs_f64();
        count_model_call(&started);
        match started {
            Raced::Done(Ok(cache)) => Ok(cache),
            Raced::Done(Err(e)) => Err(ep.model_failure(e)),
            Raced::Deadline => Err(ExitReason::WallClockTimeout),
            Raced::Cancelled => Err(ExitReason::Cancelled),
        }
    }

    /// Query, run the calls, append the observations, until something ends the episode.
    async fn turns(
        &self,
        rollout: &Rollout<'_>,
        cache: &mut RolloutCache,
        ep: &mut Episode,
    ) -> ExitReason {
        // A prompt over the limits ends the rollout here, with the prompt kept whole.
        if let Err(e) = cache.restrict_limits(self.config.limits) {
            return ep.model_failure(e);
        }
        loop {
            if rollout.cancel().is_cancelled() {
                return ExitReason::Cancelled;
            }
            if rollout.past_deadline() {
                return ExitReason::WallClockTimeout;
            }
            if cache.assistant_turns() >= self.config.max_turns {
                return ExitReason::MaxTurns;
            }
            let turn = match self.query(rollout, cache, ep).await {
                Ok(turn) => turn,
                Err(reason) => return reason,
            };
            let observations = match execute_calls(self, rollout, &turn, ep).await {
                TurnOutcome::Continue(obs) => obs,
                TurnOutcome::End(reason, obs) => {
                    ep.tail = obs;
                    return reason;
                }
            };
            if rollout.past_deadline() {
                ep.tail = observations;
                return ExitReason::WallClockTimeout;
            }
            let t0 = Instant::now();
            let appended = rollout
                .race(self.model.append(cache, observations.clone()))
                .await;
            ep.timings.model += t0.elapsed().as_secs_f64();
            count_model_call(&appended);
            let ended = match appended {
                Raced::Done(Ok(())) => continue,
                Raced::Done(Err(e)) => ep.model_failure(e),
                Raced::Deadline => ExitReason::WallClockTimeout,
                Raced::Cancelled => return ExitReason::Cancelled,
            };
            ep.tail = observations;
            return ended;
        }
    }

    /// One model call (under the run's model permits); a turn cut by the length budget that
    /// leaves no room for another ends the episode, masked if so configured.
    async fn query(
        &self,
        rollout: &Rollout<'_>,
        cache: &mut RolloutCache,
        ep: &mut Episode,
    ) -> std::result::Result<AssistantTurn, ExitReason> {
        let t0 = Instant::now();
        let permits = rollout.control.model_permits.as_ref();
        let sampling = &self.config.sampling;
        let query = async {
            let _permit = match permits {
                Some(s) => Some(s.acquire().await.map_err(|_| Error::Cancelled {
                    reason: "model permits closed".into(),
                })?),
                None => None,
            };
            self.model.query(cache, sampling).await
        };
        let queried = rollout.race(query).await;
        ep.timings.model += t0.elapsed().as_secs_f64();
        telemetry::model_query_time(t0.elapsed());
        count_model_call(&queried);
        let turn = match queried {
            Raced::Done(Ok(t)) => t,
            Raced::Done(Err(e)) => return Err(ep.model_failure(e)),
            Raced::Deadline => return Err(ExitReason::WallClockTimeout),
            Raced::Cancelled => return Err(ExitReason::Cancelled),
        };
        ep.counts.turns = cache.assistant_turns();
        ep.counts.sampled_tokens += turn.sampled_tokens as u64;
        telemetry::tokens_generated(turn.sampled_tokens as u64);
        if turn.finish_reason == FinishReason::Length {
            if let Err(e) = cache.generation_budget(None) {
                if self.config.mask_truncated_turn {
                    cache.mask_out_turn(cache.assistant_turns().saturating_sub(1));
                }
                return Err(ep.model_failure(e));
            }
        }
        Ok(turn)
    }

    pub(crate) fn tools(&self) -> &ToolSet {
        &self.tools
    }

    pub(crate) fn loop_config(&self) -> &LoopConfig {
        &self.config
    }

    /// Scores the ended episode (when its ending allows a reward): a failing, timed-out or
    /// non-finite reward makes a normal ending a reward error.
    async fn score(
        &self,
        rollout: &Rollout<'_>,
        reason: ExitReason,
        messages: &[Message],
        ep: &mut Episode,
    ) -> (ExitReason, Option<RewardOutcome>) {
        let Some(reward) = &self.reward else {
            return (reason, None);
        };
        if !reason.allows_reward() || rollout.cancel().is_cancelled() {
            return (reason, None);
        }
        let ctx = RewardContext {
            task: &rollout.task,
            messages,
            signal: ep.signal.as_ref(),
            deployment: rollout.deployment,
        };
        let t0 = Instant::now();
        let deadline = self.config.reward_timeout.map(|d| t0 + d);
        let scored = race(reward.score(&ctx), deadline, rollout.cancel()).await;
        ep.timings.reward = t0.elapsed().as_secs_f64();
        let (failure, class) = match scored {
            Raced::Done(Ok(outcome)) if outcome.score.is_finite() => {
                telemetry::reward_scored(reward.name(), t0.elapsed(), None);
                return (reason, Some(outcome));
            }
            Raced::Done(Ok(outcome)) => (
                format!(
                    "reward `{}` returned a non-finite score {}",
                    reward.name(),
                    outcome.score
                ),
                "non_finite",
            ),
            Raced::Done(Err(e)) => (e.to_string(), "error"),
            Raced::Deadline => (
                format!(
                    "reward `{}` timed out after {:?}",
                    reward.name(),
                    self.config.reward_timeout.unwrap_or_default()
                ),
                "timeout",
            ),
            Raced::Cancelled => return (ExitReason::Cancelled, None),
        };
        telemetry::reward_scored(reward.name(), t0.elapsed(), Some(class));
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

    /// The token state for the record, with the model's full re-render where it has one.
    fn output(&self, cache: &mut RolloutCache) -> AgentLoopOutput {
        let mut output = cache.to_agent_loop_output();
        // Recorded for inspection only: a failed render leaves the trajectory as it is.
        output.rerender_ids = self.model.rerender_ids(cache).unwrap_or_else(|e| {
            tracing::warn!(
                rollout = cache.id(),
                "full re-render for the record failed: {e}"
            );
            None
        });
        output
    }
}

/// Counts one model call of the loop by how it ended.
fn count_model_call<T>(raced: &Raced<Result<T>>) {
    match raced {
        Raced::Done(Ok(_)) => telemetry::model_call("ok", None),
        Raced::Done(Err(e)) => telemetry::model_call("error", Some(e)),
        Raced::Deadline => telemetry::model_call("deadline", None),
        Raced::Cancelled => telemetry::model_call("cancelled", None),
    }
}
