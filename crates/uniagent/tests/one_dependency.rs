//! A whole rollout from this one dependency: the host sandbox (the real `uniagent-sandbox`
//! server as a child process), the built-in tools, an answer-matching reward and the loop;
//! only the model is scripted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use uniagent::agent::{AgentInteraction, ExitReason, LoopConfig, RolloutControl};
use uniagent::rewards::AnswerMatch;
use uniagent::sandboxes::{HostConfig, HostDeployment};
use uniagent::testing::{ScriptedChatModel, ScriptedTurn};
use uniagent::tools::{ExecuteBash, Finish};
use uniagent::{Deployment, Message, Role, Task, Tool, ToolCall};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_needs_nothing_but_the_facade() {
    let server = match uniagent::sandboxes::host::find_server_binary(None) {
        Ok(path) => path,
        // `cargo test --workspace` builds the server next to this test; `-p uniagent` may not.
        Err(e) => {
            eprintln!("SKIPPED: {e} (build it with `cargo build -p uniagent-sandboxes --features server --bin uniagent-sandbox`)");
            return;
        }
    };
    let work = std::env::temp_dir().join(format!("uniagent-facade-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("answer.txt"), "42\n").unwrap();
    let command = format!("cat {}/answer.txt", work.display());

    let sandbox: Arc<dyn Deployment> = Arc::new(HostDeployment::new(HostConfig {
        server_binary: Some(server),
        ..HostConfig::default()
    }));
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::Reply(Message::assistant_with_calls(
            None,
            vec![ToolCall::new(
                "call_0",
                "execute_bash",
                json!({ "command": command }),
            )],
        )),
        ScriptedTurn::Reply(Message::assistant_with_calls(
            None,
            vec![ToolCall::new("call_1", "finish", json!({"answer": "42"}))],
        )),
    ]);
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(ExecuteBash {
            timeout: Duration::from_secs(30),
            ..ExecuteBash::default()
        }),
        Arc::new(Finish),
    ];
    let agent = AgentInteraction::new(Arc::new(model), tools, LoopConfig::default())
        .unwrap()
        .with_reward(Arc::new(AnswerMatch::default()));
    let task = Arc::new(
        Task::new("facade-0", vec![Message::user("What is in answer.txt?")])
            .with_metadata("answer", json!("42")),
    );

    sandbox.start().await.unwrap();
    let trajectory = agent
        .run(task, 0, Some(sandbox.clone()), &RolloutControl::default())
        .await;
    sandbox.stop().await.unwrap();
    std::fs::remove_dir_all(&work).unwrap();

    assert_eq!(trajectory.exit_reason, ExitReason::Finished);
    let observation = trajectory
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .and_then(|m| m.content.as_deref())
        .unwrap();
    assert!(observation.contains("42"), "{observation}");
    assert_eq!(trajectory.reward.as_ref().unwrap().score, 1.0);
}
