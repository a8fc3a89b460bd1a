//! [`RolloutParts`]: what an environment brings to a rollout, and the one place where a model,
//! a loop configuration and those parts become a [`Runner`]. `uniagent run`, `uniagent train`,
//! the rollout service and cassette replay all assemble their runners here.

use std::fmt;
use std::sync::Arc;

use super::{Runner, RunnerConfig, SandboxFactory};
use crate::agent::{AgentInteraction, LoopConfig};
use crate::error::Result;
use crate::model::ChatModel;
use crate::reward::RewardSpec;
use crate::telemetry::RunLabels;
use crate::tool::Tool;

/// An environment's contribution to a rollout: the tools offered to the model, how a finished
/// episode is scored, and a fresh sandbox per rollout.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::sync::Arc;
/// use serde_json::json;
/// use uniagent_core::agent::{CancellationToken, ExitReason, LoopConfig, Trajectory};
/// use uniagent_core::runner::{RolloutParts, RunnerConfig};
/// use uniagent_core::telemetry::RunLabels;
/// use uniagent_core::testing::{RecordingTool, ScriptedChatModel, ScriptedTurn};
/// use uniagent_core::{EpisodeSignal, Message, Task, ToolCall, ToolOutput};
///
/// let finish = RecordingTool::new("finish", |_| {
///     Ok(ToolOutput::success("done").with_signal(EpisodeSignal::Finish { answer: "4".into() }))
/// });
/// let parts = RolloutParts::new(vec![Arc::new(finish)]);
/// let model = ScriptedChatModel::new(vec![ScriptedTurn::Reply(Message::assistant_with_calls(
///     None,
///     vec![ToolCall::new("c0", "finish", json!({}))],
/// ))]);
/// let agent = parts.agent(Arc::new(model), LoopConfig::default())?;
/// let runner = parts.runner(agent, RunnerConfig::default(), RunLabels::new("demo", "run"))?;
/// let mut out: Vec<Trajectory> = Vec::new();
/// let task = Task::new("sum", vec![Message::user("2 + 2?")]);
/// runner.run(vec![task], &CancellationToken::new(), &mut out).await?;
/// assert_eq!(out[0].exit_reason, ExitReason::Finished);
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct RolloutParts {
    /// The tools offered to the model.
    pub tools: Vec<Arc<dyn Tool>>,
    /// How finished trajectories are scored (`None`: they are not).
    pub reward: Option<Arc<dyn RewardSpec>>,
    /// Each rollout's sandbox, setup included (`None`: the tools need none).
    pub sandboxes: Option<Arc<dyn SandboxFactory>>,
}

impl RolloutParts {
    /// Parts with `tools`, no reward and no sandbox.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        Self {
            tools,
            ..Self::default()
        }
    }

    /// With `reward` scoring every episode.
    pub fn with_reward(mut self, reward: Arc<dyn RewardSpec>) -> Self {
        self.reward = Some(reward);
        self
    }

    /// With a sandbox per rollout from `factory`.
    pub fn with_sandboxes(mut self, factory: Arc<dyn SandboxFactory>) -> Self {
        self.sandboxes = Some(factory);
        self
    }

    /// The agent loop of `model` over these tools (and reward) with `loop_config`.
    pub fn agent(
        &self,
        model: Arc<dyn ChatModel>,
        loop_config: LoopConfig,
    ) -> Result<AgentInteraction> {
        let agent = AgentInteraction::new(model, self.tools.clone(), loop_config)?;
        Ok(match &self.reward {
            Some(reward) => agent.with_reward(Arc::clone(reward)),
            None => agent,
        })
    }

    /// A runner of `agent` (from [`RolloutParts::agent`]) that gives every rollout a sandbox
    /// from these parts and reports its metrics under `labels`.
    pub fn runner(
        &self,
        agent: AgentInteraction,
        config: RunnerConfig,
        labels: RunLabels,
    ) -> Result<Runner> {
        let mut runner = Runner::new(agent, config)?.with_labels(labels);
        runner.sandboxes = self.sandboxes.clone();
        Ok(runner)
    }
}

impl fmt::Debug for RolloutParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .tools
            .iter()
            .map(|t| t.spec().name().to_owned())
            .collect();
        f.debug_struct("RolloutParts")
            .field("tools", &names)
            .field("reward", &self.reward.as_ref().map(|r| r.name().to_owned()))
            .field("sandboxes", &self.sandboxes.is_some())
            .finish()
    }
}
