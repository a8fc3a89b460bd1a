//! The interaction loop and the runner over real sandboxes: each rollout gets its own
//! `HostDeployment` (our `uniagent-sandbox` as a child process), commands really run in a bash
//! session, the reward reads the sandbox before it stops, and a hanging command is cut by the
//! tool timeout and counted against the budget.

#![cfg(all(feature = "host", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::agent::{
    AgentInteraction, CancellationToken, ExitReason, LoopConfig, Trajectory,
};
use uniagent_core::runner::{Runner, RunnerConfig};
use uniagent_core::testing::{BashTool, RecordingTool, ScriptedChatModel, ScriptedTurn};
use uniagent_core::{
    Deployment, DeploymentExt, EpisodeSignal, Error, Message, Result, RewardContext, RewardOutcome,
    RewardSpec, Task, ToolCall, ToolOutput,
};
use uniagent_sandboxes::{HostConfig, HostDeployment};

/// 1.0 when `answer.txt` in the sandbox's work directory holds the task's number.
#[derive(Debug)]
struct FileReward;

#[async_trait]
impl RewardSpec for FileReward {
    fn name(&self) -> &str {
        "file"
    }
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        let sandbox = ctx
            .deployment
            .ok_or_else(|| Error::internal("no sandbox"))?;
        let out = sandbox
            .bash("default", "cat answer.txt", Duration::from_secs(10))
            .await?;
        let want = ctx.task.metadata["n"]
            .as_u64()
            .unwrap_or_default()
            .to_string();
        Ok(RewardOutcome::binary(out.output.trim() == want))
    }
}

fn call(id: &str, name: &str, args: Value) -> ScriptedTurn {
    ScriptedTurn::Reply(Message::assistant_with_calls(
        None,
        vec![ToolCall::new(id, name, args)],
    ))
}

fn finish_tool() -> RecordingTool {
    RecordingTool::new("finish", |_| {
        Ok(
            ToolOutput::success("done").with_signal(EpisodeSignal::Finish {
                answer: String::new(),
            }),
        )
    })
}

fn real_server() -> HostConfig {
    HostConfig {
        server_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))),
        ..HostConfig::default()
    }
}

/// A factory of real host sandboxes that remembers each one.
fn host_factory(
    created: Arc<Mutex<Vec<Arc<HostDeployment>>>>,
) -> impl Fn(&Task) -> Result<Box<dyn Deployment>> {
    move |_task: &Task| {
        let d = Arc::new(HostDeployment::new(real_server()));
        created.lock().unwrap().push(d.clone());
        Ok(Box::new(d) as Box<dyn Deployment>)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_run_commands_in_their_own_sandbox_and_are_scored_before_stop() {
    // The number is read into a shell variable by one call and written by the next: each
    // sandbox keeps its own session state, and each holds its own task's number.
    let model = ScriptedChatModel::new(vec![
        call("c0", "bash", json!({"command": "export N=$(cat n.txt)"})),
        call(
            "c1",
            "bash",
            json!({"command": "echo $N > answer.txt && cat answer.txt"}),
        ),
        call("c2", "finish", json!({})),
    ]);
    let agent = AgentInteraction::new(
        Arc::new(model),
        vec![Arc::new(BashTool), Arc::new(finish_tool())],
        LoopConfig::default(),
    )
    .unwrap()
    .with_reward(Arc::new(FileReward));
    let created = Arc::new(Mutex::new(Vec::new()));
    let runner = Runner::new(
        agent,
        RunnerConfig {
            max_concurrent_rollouts: 3,
            ..RunnerConfig::default()
        },
    )
    .unwrap()
    .with_sandboxes(seeding_factory(created.clone()));
    let tasks: Vec<Task> = (0..3)
        .map(|i| {
            Task::new(format!("t{i}"), vec![Message::user("write n")])
                .with_metadata("n", json!(i + 10))
        })
        .collect();
    let mut out: Vec<Trajectory> = Vec::new();
    let summary = runner
        .run(tasks, &CancellationToken::new(), &mut out)
        .await
        .unwrap();
    assert_eq!(summary.exit_reasons[&ExitReason::Finished], 3, "{out:#?}");
    assert_eq!(summary.succeeded, 3);
    for t in &out {
        let n = t.task_id[1..].parse::<u64>().unwrap() + 10;
        assert!(
            t.messages.iter().any(|m| m.text().trim() == n.to_string()),
            "{:?}",
            t.messages
        );
    }
    let sandboxes: Vec<Arc<HostDeployment>> = created.lock().unwrap().clone();
    assert_eq!(sandboxes.len(), 3);
    for d in &sandboxes {
        assert!(
            d.is_alive().await.map(|r| !r.is_alive).unwrap_or(true),
            "sandbox still alive after the run"
        );
    }
}

/// A host sandbox that, once started, writes the task's number into `n.txt`.
#[derive(Debug)]
struct Seeded {
    inner: Arc<HostDeployment>,
    n: u64,
}

#[async_trait]
impl Deployment for Seeded {
    fn backend(&self) -> &str {
        self.inner.backend()
    }
    fn capabilities(&self) -> uniagent_core::Capabilities {
        self.inner.capabilities()
    }
    async fn start(&self) -> Result<()> {
        self.inner.start().await?;
        self.inner
            .sh(&format!("echo {} > n.txt", self.n), Duration::from_secs(10))
            .await?;
        Ok(())
    }
    async fn stop(&self) -> Result<()> {
        self.inner.stop().await
    }
    async fn is_alive(&self) -> Result<uniagent_core::sandbox::IsAliveResponse> {
        self.inner.is_alive().await
    }
    async fn create_session(
        &self,
        r: uniagent_core::sandbox::CreateSessionRequest,
    ) -> Result<uniagent_core::sandbox::CreateSessionResponse> {
        self.inner.create_session(r).await
    }
    async fn run_in_session(
        &self,
        a: uniagent_core::sandbox::Action,
    ) -> Result<uniagent_core::sandbox::BashObservation> {
        self.inner.run_in_session(a).await
    }
    async fn close_session(
        &self,
        r: uniagent_core::sandbox::CloseSessionRequest,
    ) -> Result<uniagent_core::sandbox::CloseSessionResponse> {
        self.inner.close_session(r).await
    }
    async fn execute(
        &self,
        c: uniagent_core::sandbox::Command,
    ) -> Result<uniagent_core::sandbox::CommandResponse> {
        self.inner.execute(c).await
    }
    async fn read_file(
        &self,
        r: uniagent_core::sandbox::ReadFileRequest,
    ) -> Result<uniagent_core::sandbox::ReadFileResponse> {
        self.inner.read_file(r).await
    }
    async fn write_file(&self, r: uniagent_core::sandbox::WriteFileRequest) -> Result<()> {
        self.inner.write_file(r).await
    }
    async fn upload(&self, r: uniagent_core::sandbox::UploadRequest) -> Result<()> {
        self.inner.upload(r).await
    }
}

/// Host sandboxes seeded with the task's number (the environment's setup step).
fn seeding_factory(
    created: Arc<Mutex<Vec<Arc<HostDeployment>>>>,
) -> impl Fn(&Task) -> Result<Box<dyn Deployment>> {
    move |task: &Task| {
        let inner = Arc::new(HostDeployment::new(real_server()));
        created.lock().unwrap().push(inner.clone());
        let n = task.metadata["n"].as_u64().unwrap_or_default();
        Ok(Box::new(Seeded { inner, n }) as Box<dyn Deployment>)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_command_is_cut_by_the_tool_timeout_and_ends_the_budget() {
    let model = ScriptedChatModel::new(vec![call("c0", "bash", json!({"command": "sleep 30"}))]);
    let cfg = LoopConfig {
        tool_timeout: Duration::from_secs(1),
        tool_transport_margin: Duration::from_secs(5),
        tool_timeout_budget: 1,
        ..LoopConfig::default()
    };
    let agent = AgentInteraction::new(Arc::new(model), vec![Arc::new(BashTool)], cfg).unwrap();
    let created = Arc::new(Mutex::new(Vec::new()));
    let runner = Runner::new(agent, RunnerConfig::default())
        .unwrap()
        .with_sandboxes(host_factory(created.clone()));
    let started = std::time::Instant::now();
    let mut out: Vec<Trajectory> = Vec::new();
    let summary = runner
        .run(
            vec![Task::new("hang", vec![Message::user("wait")])],
            &CancellationToken::new(),
            &mut out,
        )
        .await
        .unwrap();
    assert_eq!(
        summary.exit_reasons[&ExitReason::ToolTimeoutBudget],
        1,
        "{out:#?}"
    );
    assert_eq!(out[0].counts.tool_timeouts, 1);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}
