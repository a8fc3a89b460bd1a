//! The [`RewardSpec`] trait: scoring a finished trajectory.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;
use crate::message::Message;
use crate::sandbox::Deployment;
use crate::task::Task;
use crate::tool::EpisodeSignal;

/// What a reward sees: the task, the conversation, how it ended, and the still-open sandbox.
#[derive(Debug, Clone, Copy)]
pub struct RewardContext<'a> {
    /// The task.
    pub task: &'a Task,
    /// The whole conversation.
    pub messages: &'a [Message],
    /// The finish/submit signal, if the agent sent one.
    pub signal: Option<&'a EpisodeSignal>,
    /// The sandbox, still running, if the rollout had one.
    pub deployment: Option<&'a Arc<dyn Deployment>>,
}

/// A score plus the details that explain it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardOutcome {
    /// The scalar reward used for training.
    pub score: f64,
    /// Whether the task counts as solved (for success rates).
    pub success: bool,
    /// Explanations: tests passed/failed, the expected answer, logs.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub details: Map<String, Value>,
}

impl RewardOutcome {
    /// A binary outcome: score 1.0 when solved, else 0.0.
    pub fn binary(success: bool) -> Self {
        Self {
            score: if success { 1.0 } else { 0.0 },
            success,
            details: Map::new(),
        }
    }

    /// Adds one detail.
    pub fn with_detail(mut self, key: impl Into<String>, value: Value) -> Self {
        self.details.insert(key.into(), value);
        self
    }
}

/// Scores a finished trajectory.
///
/// # Contract
/// - Called once per trajectory, after the loop ends and **before** the sandbox stops, so the
///   reward can run tests or read files inside it.
/// - A wrong answer is a low score, not an error. `Err` means the reward could not be computed
///   (the sandbox died, the test harness crashed); the trajectory then ends as `reward_error`.
/// - Deterministic for the same sandbox state and conversation, unless documented otherwise.
///
/// ```
/// use async_trait::async_trait;
/// use uniagent_core::{EpisodeSignal, Result, RewardContext, RewardOutcome, RewardSpec};
///
/// #[derive(Debug)]
/// struct ExactAnswer;
///
/// #[async_trait]
/// impl RewardSpec for ExactAnswer {
///     fn name(&self) -> &str { "exact_answer" }
///     async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
///         let expected = ctx.task.metadata.get("answer").and_then(|v| v.as_str());
///         let given = match ctx.signal {
///             Some(EpisodeSignal::Finish { answer }) => Some(answer.trim()),
///             _ => None,
///         };
///         Ok(RewardOutcome::binary(expected.is_some() && expected == given))
///     }
/// }
/// ```
#[async_trait]
pub trait RewardSpec: Send + Sync + Debug + 'static {
    /// Name used in logs and summaries.
    fn name(&self) -> &str;

    /// Scores the trajectory.
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome>;
}

#[async_trait]
impl<T: RewardSpec + ?Sized> RewardSpec for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        (**self).score(ctx).await
    }
}

#[async_trait]
impl<T: RewardSpec + ?Sized> RewardSpec for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        (**self).score(ctx).await
    }
}
