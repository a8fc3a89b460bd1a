//! The [`Tool`] trait and what a tool returns.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Result;
use crate::message::ToolSpec;
use crate::sandbox::Deployment;
use crate::task::Task;

/// Outcome of a tool call as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The tool did what was asked.
    Success,
    /// The tool ran but failed (bad arguments, non-zero exit, file not found...).
    Failed,
    /// The tool ran past its timeout and was interrupted.
    TimedOut,
}

/// A request from a tool to end the episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EpisodeSignal {
    /// The agent finished with an answer (search QA, question answering).
    Finish {
        /// The final answer.
        answer: String,
    },
    /// The agent submitted its work (the patch of the work tree against the base commit).
    Submit {
        /// The submitted patch or artefact.
        patch: String,
    },
}

/// What a tool call returns: text for the model plus structured data for the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Text shown to the model as the tool message's content.
    pub content: String,
    /// Success, failure or timeout.
    pub status: ToolStatus,
    /// Set when the tool ends the episode (finish, submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<EpisodeSignal>,
    /// Data for logs and rewards, never shown to the model.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl ToolOutput {
    /// A successful result.
    pub fn success(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            status: ToolStatus::Success,
            signal: None,
            metadata: Map::new(),
        }
    }

    /// A failed result; `content` tells the model what went wrong.
    pub fn failed(content: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Failed,
            ..Self::success(content)
        }
    }

    /// A timed-out result.
    pub fn timed_out(content: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::TimedOut,
            ..Self::success(content)
        }
    }

    /// Attaches an episode-ending signal.
    pub fn with_signal(mut self, signal: EpisodeSignal) -> Self {
        self.signal = Some(signal);
        self
    }
}

/// What a tool call may use: the sandbox, the session, the time it has and the task.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The trajectory's sandbox, if it has one.
    pub deployment: Option<Arc<dyn Deployment>>,
    /// The bash session tools should run in.
    pub session: String,
    /// How long this call may take. Always shorter than the transport timeout carrying it.
    pub timeout: Duration,
    /// The task being solved.
    pub task: Arc<Task>,
    /// The id of the tool call being answered.
    pub call_id: String,
    /// The rollout making the call (`<task id>:<sample>`, as
    /// [`rollout_id`](crate::agent::rollout_id) makes it); lets a tool shared by concurrent
    /// rollouts (e.g. a [`RecordTool`](crate::cassette::RecordTool)) tell them apart.
    pub rollout_id: String,
}

impl ToolContext {
    /// The sandbox, or an error naming the tool when the trajectory has none.
    pub fn require_deployment(&self, tool: &str) -> Result<&Arc<dyn Deployment>> {
        self.deployment
            .as_ref()
            .ok_or_else(|| crate::Error::Config {
                message: format!("tool `{tool}` needs a sandbox, but this rollout has none"),
                source: None,
            })
    }
}

/// A tool the model can call.
///
/// # Contract
/// - [`spec`](Tool::spec) is an OpenAI function schema; its name is unique within a toolset.
/// - [`call`](Tool::call) receives the parsed arguments object. Anything the model did wrong
///   (bad arguments, a failing command, a timeout) is `Ok` with a [`ToolStatus`] other than
///   `Success` and a message the model can act on. `Err` is reserved for infrastructure faults
///   (the sandbox is gone, the transport failed), which end the episode as a sandbox error.
/// - A call honours `ctx.timeout`: it returns [`ToolStatus::TimedOut`] rather than exceed it.
/// - Tools are shared across concurrent rollouts: state specific to one rollout lives in the
///   sandbox, not in the tool.
///
/// ```
/// use async_trait::async_trait;
/// use serde_json::{json, Value};
/// use uniagent_core::{Result, Tool, ToolContext, ToolOutput, ToolSpec};
///
/// #[derive(Debug)]
/// struct Add;
///
/// #[async_trait]
/// impl Tool for Add {
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::function("add", "Add two integers.", json!({
///             "type": "object",
///             "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
///             "required": ["a", "b"]
///         }))
///     }
///     async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput> {
///         match (args["a"].as_i64(), args["b"].as_i64()) {
///             (Some(a), Some(b)) => Ok(ToolOutput::success((a + b).to_string())),
///             _ => Ok(ToolOutput::failed("`a` and `b` must be integers")),
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait Tool: Send + Sync + Debug + 'static {
    /// The function schema shown to the model.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput>;
}

#[async_trait]
impl<T: Tool + ?Sized> Tool for Arc<T> {
    fn spec(&self) -> ToolSpec {
        (**self).spec()
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        (**self).call(args, ctx).await
    }
}

#[async_trait]
impl<T: Tool + ?Sized> Tool for Box<T> {
    fn spec(&self) -> ToolSpec {
        (**self).spec()
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        (**self).call(args, ctx).await
    }
}
