//! The smallest end-to-end run: a scripted model calls a tool that runs a command in a sandbox,
//! reads the observation and finishes with an answer, which a reward scores — all driven by
//! [`AgentInteraction`], the same loop that serves evaluation and RL rollouts. It prints the
//! conversation, the exit reason and the verl-compatible record.
//!
//! Real sandboxes, tools and token-level models replace the scripted parts; the loop stays.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::agent::{AgentInteraction, LoopConfig, RolloutControl};
use uniagent_core::sandbox::DeploymentExt;
use uniagent_core::testing::{RecordingTool, ScriptedChatModel, ScriptedDeployment, ScriptedTurn};
use uniagent_core::{
    Deployment, EpisodeSignal, Message, Result, RewardContext, RewardOutcome, RewardSpec, Task,
    Tool, ToolCall, ToolContext, ToolOutput, ToolSpec,
};

/// Runs a command in the rollout's bash session.
#[derive(Debug)]
struct Bash;

#[async_trait]
impl Tool for Bash {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "execute_bash",
            "Run a bash command in the sandbox.",
            json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        )
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let Some(command) = args["command"].as_str() else {
            return Ok(ToolOutput::failed("`command` must be a string"));
        };
        let obs = ctx
            .require_deployment("execute_bash")?
            .bash(&ctx.session, command, ctx.timeout)
            .await?;
        Ok(ToolOutput::success(format!(
            "{}[exit code {}]",
            obs.output,
            obs.exit_code.unwrap_or(-1)
        )))
    }
}

/// 1.0 when the finish answer equals the task's `answer`.
#[derive(Debug)]
struct ExactAnswer;

#[async_trait]
impl RewardSpec for ExactAnswer {
    fn name(&self) -> &str {
        "exact_answer"
    }

    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        let expected = ctx.task.metadata.get("answer").and_then(Value::as_str);
        let given = match ctx.signal {
            Some(EpisodeSignal::Finish { answer }) => Some(answer.trim()),
            _ => None,
        };
        Ok(RewardOutcome::binary(
            expected.is_some() && expected == given,
        ))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let task = Arc::new(
        Task::new(
            "hello-0",
            vec![Message::user("What number is stored in /data/answer.txt?")],
        )
        .with_metadata("answer", json!("42")),
    );
    let sandbox: Arc<dyn Deployment> =
        Arc::new(ScriptedDeployment::new().on_command("cat /data/answer.txt", "42\n", 0));
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::Reply(Message::assistant_with_calls(
            Some("Let me read the file.".into()),
            vec![ToolCall::new(
                "call_0",
                "execute_bash",
                json!({"command": "cat /data/answer.txt"}),
            )],
        )),
        ScriptedTurn::Reply(Message::assistant_with_calls(
            None,
            vec![ToolCall::new("call_1", "finish", json!({"answer": "42"}))],
        )),
    ]);
    let finish = RecordingTool::new("finish", |args| {
        let answer = args["answer"].as_str().unwrap_or_default().to_owned();
        Ok(ToolOutput::success("Finished.").with_signal(EpisodeSignal::Finish { answer }))
    });

    let agent = AgentInteraction::new(
        Arc::new(model),
        vec![Arc::new(Bash), Arc::new(finish)],
        LoopConfig::default(),
    )?
    .with_reward(Arc::new(ExactAnswer));
    sandbox.start().await?;
    let trajectory = agent
        .run(
            task,
            0,
            Some(Arc::clone(&sandbox)),
            &RolloutControl::default(),
        )
        .await;
    sandbox.stop().await?;

    println!(
        "{}",
        serde_json::to_string_pretty(&trajectory.messages).unwrap_or_default()
    );
    println!(
        "{}",
        serde_json::to_string(&trajectory.output).unwrap_or_default()
    );
    let reward = trajectory.reward.as_ref().map_or(f64::NAN, |r| r.score);
    println!(
        "exit: {} | reward: {reward} | success: {}",
        trajectory.exit_reason,
        trajectory.is_success()
    );
    Ok(())
}
