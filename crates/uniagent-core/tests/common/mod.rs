//! Shared helpers of the loop and runner tests: real tools over the scripted parts.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::agent::{AgentInteraction, LoopConfig, RolloutControl, Trajectory};
use uniagent_core::testing::{RecordingTool, ScriptedTurn};
use uniagent_core::{
    ChatModel, Deployment, EpisodeSignal, Message, Result, Task, Tool, ToolCall, ToolContext,
    ToolOutput, ToolSpec,
};

/// The Qwen2.5 codec (tokenizer and chat template fixtures, Hermes tool calls), loaded once:
/// parsing the 150k-token vocabulary dominates a test's cost otherwise.
#[cfg(feature = "codec")]
pub fn codec() -> Arc<uniagent_core::codec::Codec> {
    static CODEC: std::sync::OnceLock<Arc<uniagent_core::codec::Codec>> =
        std::sync::OnceLock::new();
    CODEC
        .get_or_init(|| {
            let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/tokenizers/qwen2.5");
            let codec = uniagent_core::codec::Codec::from_dir(dir).unwrap();
            Arc::new(codec.with_tool_parser(uniagent_core::parsers::ToolCallFormat::Hermes))
        })
        .clone()
}

pub fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

pub fn reply(calls: Vec<ToolCall>) -> ScriptedTurn {
    ScriptedTurn::Reply(Message::assistant_with_calls(None, calls))
}

pub fn echo_call(id: &str) -> ScriptedTurn {
    reply(vec![call(id, "echo", json!({"text": "ok"}))])
}

pub fn echo_tool() -> RecordingTool {
    RecordingTool::new("echo", |args| {
        Ok(ToolOutput::success(
            args["text"].as_str().unwrap_or_default(),
        ))
    })
}

pub fn finish_tool() -> RecordingTool {
    RecordingTool::new("finish", |args| {
        let answer = args["answer"].as_str().unwrap_or_default().to_owned();
        Ok(ToolOutput::success(answer.clone()).with_signal(EpisodeSignal::Finish { answer }))
    })
}

pub fn submit_tool() -> RecordingTool {
    RecordingTool::new("submit", |_| {
        Ok(
            ToolOutput::success("<<<Finished>>>").with_signal(EpisodeSignal::Submit {
                patch: String::new(),
            }),
        )
    })
}

pub fn task() -> Arc<Task> {
    Arc::new(Task::new(
        "t",
        vec![Message::system("be brief"), Message::user("solve it")],
    ))
}

pub async fn run_with(
    model: impl ChatModel,
    tools: Vec<Arc<dyn Tool>>,
    config: LoopConfig,
    deployment: Option<Arc<dyn Deployment>>,
) -> Trajectory {
    let agent = AgentInteraction::new(Arc::new(model), tools, config).unwrap();
    agent
        .run(task(), 0, deployment, &RolloutControl::default())
        .await
}

/// Sleeps far longer than its timeout, recording the timeout it was given.
#[derive(Debug, Default)]
pub struct SlowTool {
    pub seen_timeouts: std::sync::Mutex<Vec<Duration>>,
}

#[async_trait]
impl Tool for SlowTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "slow",
            "Never returns in time.",
            json!({"type": "object", "properties": {}}),
        )
    }

    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        self.seen_timeouts.lock().unwrap().push(ctx.timeout);
        tokio::time::sleep(ctx.timeout * 100).await;
        Ok(ToolOutput::success("too late"))
    }
}
