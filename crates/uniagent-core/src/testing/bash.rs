//! [`BashTool`]: the smallest real tool that drives a sandbox.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::message::ToolSpec;
use crate::sandbox::{DeploymentExt, ExceptionClass};
use crate::tool::{Tool, ToolContext, ToolOutput};

/// `bash(command)`: runs `command` in the rollout's bash session with the call's timeout. A
/// command timeout is a timed-out result (the episode goes on), any other sandbox error is an
/// infrastructure fault. For tests of the loop and of backends; agents use
/// `uniagent_tools::ExecuteBash`, which also interrupts and cleans up output.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::sync::Arc;
/// use serde_json::json;
/// use uniagent_core::sandbox::CreateSessionRequest;
/// use uniagent_core::testing::{BashTool, ScriptedDeployment};
/// use uniagent_core::{Deployment, Task, Tool, ToolContext};
///
/// let sandbox = ScriptedDeployment::new().on_command("echo hi", "hi\n", 0);
/// sandbox.create_session(CreateSessionRequest::new("default")).await?;
/// let ctx = ToolContext {
///     deployment: Some(Arc::new(sandbox)),
///     session: "default".into(),
///     timeout: std::time::Duration::from_secs(5),
///     task: Arc::new(Task::new("t", vec![])),
///     call_id: "call_0".into(),
///     rollout_id: "t:0".into(),
/// };
/// let out = BashTool.call(json!({"command": "echo hi"}), &ctx).await?;
/// assert_eq!(out.content, "hi\n");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct BashTool;

#[async_trait]
impl Tool for BashTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "bash",
            "Run a bash command.",
            json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        )
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let Some(command) = args["command"].as_str() else {
            return Ok(ToolOutput::failed("`command` must be a string"));
        };
        let sandbox = ctx.require_deployment("bash")?;
        match sandbox.bash(&ctx.session, command, ctx.timeout).await {
            Ok(obs) => Ok(ToolOutput::success(obs.output)),
            Err(Error::Runtime { exception, .. })
                if exception.class() == ExceptionClass::CommandTimeout =>
            {
                Ok(ToolOutput::timed_out(exception.message))
            }
            Err(e) => Err(e),
        }
    }
}
