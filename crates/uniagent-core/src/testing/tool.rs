//! [`RecordingTool`]: a tool that answers with a function of its arguments.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::lock;
use crate::error::Result;
use crate::message::ToolSpec;
use crate::tool::{Tool, ToolContext, ToolOutput};

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// The tool call id.
    pub call_id: String,
    /// The arguments.
    pub args: Value,
}

type Responder = dyn Fn(&Value) -> Result<ToolOutput> + Send + Sync;

/// A tool with a fixed spec whose answer is computed by a closure; every call is recorded.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::sync::Arc;
/// use serde_json::json;
/// use uniagent_core::testing::RecordingTool;
/// use uniagent_core::{Task, Tool, ToolContext, ToolOutput, ToolStatus};
///
/// let echo = RecordingTool::new("echo", |args| Ok(ToolOutput::success(args["text"].to_string())));
/// let ctx = ToolContext {
///     deployment: None,
///     session: "default".into(),
///     timeout: std::time::Duration::from_secs(1),
///     task: Arc::new(Task::new("t", vec![])),
///     call_id: "call_0".into(),
///     rollout_id: "t:0".into(),
/// };
/// let out = echo.call(json!({"text": "hi"}), &ctx).await?;
/// assert_eq!((out.status, out.content.as_str()), (ToolStatus::Success, "\"hi\""));
/// assert_eq!(echo.calls()[0].call_id, "call_0");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RecordingTool {
    spec: ToolSpec,
    respond: Arc<Responder>,
    calls: Arc<Mutex<Vec<RecordedCall>>>,
}

impl std::fmt::Debug for RecordingTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingTool")
            .field("name", &self.spec.function.name)
            .finish_non_exhaustive()
    }
}

impl RecordingTool {
    /// A tool named `name` taking any object, answered by `respond`.
    pub fn new(
        name: &str,
        respond: impl Fn(&Value) -> Result<ToolOutput> + Send + Sync + 'static,
    ) -> Self {
        let spec = ToolSpec::function(
            name,
            format!("Scripted tool `{name}`."),
            serde_json::json!({"type": "object", "properties": {}, "additionalProperties": true}),
        );
        Self::with_spec(spec, respond)
    }

    /// A tool with an explicit spec.
    pub fn with_spec(
        spec: ToolSpec,
        respond: impl Fn(&Value) -> Result<ToolOutput> + Send + Sync + 'static,
    ) -> Self {
        Self {
            spec,
            respond: Arc::new(respond),
            calls: Arc::default(),
        }
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<RecordedCall> {
        lock(&self.calls).clone()
    }
}

#[async_trait]
impl Tool for RecordingTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        lock(&self.calls).push(RecordedCall {
            call_id: ctx.call_id.clone(),
            args: args.clone(),
        });
        (self.respond)(&args)
    }
}
