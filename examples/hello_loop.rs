//! The smallest end-to-end run through the core traits: a scripted model calls a tool that runs
//! a command in a sandbox, reads the observation and finishes with an answer, which a reward
//! scores. It prints the conversation and the verl-compatible record.
//!
//! The full interaction loop, real sandboxes and the closed-loop trainer replace each scripted
//! part as they land; the shapes stay the same.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use uniagent_core::testing::{ScriptedChatModel, ScriptedDeployment, ScriptedTurn};
use uniagent_core::{
    ChatModel, Deployment, DeploymentExt, EpisodeSignal, Message, RewardContext, RewardOutcome, SamplingParams,
    Task, ToolCall,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> uniagent_core::Result<()> {
    let task = Arc::new(
        Task::new("hello-0", vec![Message::user("What number is stored in /data/answer.txt?")])
            .with_metadata("answer", json!("42")),
    );
    let sandbox: Arc<dyn Deployment> = Arc::new(
        ScriptedDeployment::new().on_command("cat /data/answer.txt", "42\n", 0),
    );
    sandbox.create_session(uniagent_core::sandbox::CreateSessionRequest::new("default")).await?;
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::Reply(Message::assistant_with_calls(
            Some("Let me read the file.".into()),
            vec![ToolCall::new("call_0", "execute_bash", json!({"command": "cat /data/answer.txt"}))],
        )),
        ScriptedTurn::Reply(Message::assistant_with_calls(
            None,
            vec![ToolCall::new("call_1", "finish", json!({"answer": "42"}))],
        )),
    ]);

    let mut cache = model.start(&task.id, task.messages.clone(), vec![]).await?;
    let mut signal = None;
    while signal.is_none() {
        let turn = model.query(&mut cache, &SamplingParams::default()).await?;
        let mut observations = Vec::new();
        for call in &turn.message.tool_calls {
            let args = &call.function.arguments;
            let content = match call.function.name.as_str() {
                "execute_bash" => {
                    let command = args["command"].as_str().unwrap_or_default();
                    let obs = sandbox.bash("default", command, Duration::from_secs(10).as_secs_f64()).await?;
                    format!("{}[exit code {}]", obs.output, obs.exit_code.unwrap_or(-1))
                }
                "finish" => {
                    signal = Some(EpisodeSignal::Finish { answer: args["answer"].as_str().unwrap_or_default().into() });
                    "Finished.".to_owned()
                }
                other => format!("unknown tool `{other}`"),
            };
            observations.push(Message::tool(call.id.clone(), content));
        }
        model.append(&mut cache, observations).await?;
    }

    let ctx = RewardContext { task: &task, messages: cache.messages(), signal: signal.as_ref(), deployment: Some(&sandbox) };
    let expected = ctx.task.metadata["answer"].as_str();
    let given = match ctx.signal {
        Some(EpisodeSignal::Finish { answer }) => Some(answer.as_str()),
        _ => None,
    };
    let reward = RewardOutcome::binary(expected == given);
    sandbox.stop().await?;

    let mut record = cache.to_agent_loop_output();
    record.reward_score = Some(reward.score);
    println!("{}", serde_json::to_string_pretty(cache.messages()).unwrap_or_default());
    println!("{}", serde_json::to_string(&record).unwrap_or_default());
    println!("reward: {} (success: {})", reward.score, reward.success);
    Ok(())
}
