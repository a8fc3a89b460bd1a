//! The batch runner: concurrency limits, sandboxes started and stopped per rollout, reward
//! before stop, isolation of errors and panics, cancellation, JSONL output and the summary.

// Test helpers may unwrap (a panic fails the test); core's `Error` is large by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use uniagent_core::agent::{
    AgentInteraction, CancellationToken, ExitReason, LoopConfig, Trajectory,
};
use uniagent_core::runner::{JsonlSink, ProgressEvent, Runner, RunnerConfig, TrajectorySink};
use uniagent_core::testing::{ScriptedChatModel, ScriptedDeployment, ScriptedTurn};
use uniagent_core::{
    AssistantTurn, ChatModel, Deployment, DeploymentExt, Error, Message, ModelCapabilities, Result,
    RewardContext, RewardOutcome, RewardSpec, RolloutCache, SamplingParams, Task, Tool,
    ToolContext, ToolOutput, ToolSpec,
};

fn tasks(n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| Task::new(format!("task{i}"), vec![Message::user(format!("do {i}"))]))
        .collect()
}

/// Sandboxes handed out by the factory, to check afterwards that each was stopped.
#[derive(Clone, Default)]
struct Sandboxes(Arc<Mutex<Vec<ScriptedDeployment>>>);

impl Sandboxes {
    fn factory(
        &self,
        make: fn() -> ScriptedDeployment,
    ) -> impl Fn(&Task) -> Result<Box<dyn Deployment>> {
        let all = self.0.clone();
        move |_task: &Task| {
            let d = make();
            all.lock().unwrap().push(d.clone());
            Ok(Box::new(d) as Box<dyn Deployment>)
        }
    }

    fn all(&self) -> Vec<ScriptedDeployment> {
        self.0.lock().unwrap().clone()
    }
}

/// An agent whose model calls `finish` at once.
fn finishing_agent() -> AgentInteraction {
    let finish = call("c0", "finish", json!({"answer": "x"}));
    let model = ScriptedChatModel::new(vec![reply(vec![finish])]).without_recording();
    AgentInteraction::new(
        Arc::new(model),
        vec![Arc::new(finish_tool())],
        LoopConfig::default(),
    )
    .unwrap()
}

/// Runs `echo scored` in the sandbox: proves the reward sees a live sandbox, and leaves a trace
/// in its log before `stop`.
#[derive(Debug)]
struct SandboxReward;

#[async_trait]
impl RewardSpec for SandboxReward {
    fn name(&self) -> &str {
        "sandbox"
    }
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        let d = ctx
            .deployment
            .ok_or_else(|| Error::internal("no sandbox"))?;
        let out = d
            .bash("default", "echo scored", Duration::from_secs(5))
            .await?;
        Ok(RewardOutcome::binary(out.output == "scored\n"))
    }
}

#[tokio::test]
async fn every_rollout_gets_a_sandbox_scored_before_it_stops() {
    let agent = finishing_agent().with_reward(Arc::new(SandboxReward));
    let sandboxes = Sandboxes::default();
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let runner = Runner::new(
        agent,
        RunnerConfig {
            samples_per_task: 3,
            ..RunnerConfig::default()
        },
    )
    .unwrap()
    .with_sandboxes(
        sandboxes.factory(|| ScriptedDeployment::new().on_command("echo scored", "scored\n", 0)),
    )
    .with_progress(move |e| ev.lock().unwrap().push(e.clone()));
    let mut sink = JsonlSink::new(Vec::new());
    let summary = runner
        .run(tasks(4), &CancellationToken::new(), &mut sink)
        .await
        .unwrap();
    assert_eq!(summary.rollouts, 12);
    assert_eq!(summary.exit_reasons[&ExitReason::Finished], 12);
    assert_eq!(
        (summary.succeeded, summary.success_rate, summary.mean_reward),
        (12, 1.0, Some(1.0))
    );
    let all = sandboxes.all();
    assert_eq!(all.len(), 12);
    for d in &all {
        let log = d.log();
        let scored = log
            .iter()
            .position(|l| l == "run_in_session: echo scored")
            .unwrap();
        let stopped = log.iter().position(|l| l == "stop").unwrap();
        assert!(log[0] == "start" && scored < stopped, "{log:?}");
        assert!(d.is_stopped());
    }
    let text = String::from_utf8(sink.into_inner()).unwrap();
    let lines: Vec<Trajectory> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12);
    let mut ids: Vec<&str> = lines.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 12);
    assert!(lines
        .iter()
        .all(|t| t.output.reward_score == Some(1.0) && t.timings.total >= t.timings.model));
    let events = events.lock().unwrap();
    let started = events
        .iter()
        .filter(|e| matches!(e, ProgressEvent::Started { .. }))
        .count();
    let finished = events
        .iter()
        .filter(|e| matches!(e, ProgressEvent::Finished { success: true, .. }))
        .count();
    assert_eq!((started, finished), (12, 12));
}

/// Wraps a model: each query takes 10 ms (virtual) and the peak number in flight is recorded.
#[derive(Debug)]
struct Metered {
    inner: ScriptedChatModel,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

#[async_trait]
impl ChatModel for Metered {
    fn name(&self) -> &str {
        "metered"
    }
    // `start` and `append` stay the trait's defaults, as in the scripted model.
    fn capabilities(&self) -> ModelCapabilities {
        self.inner.capabilities()
    }
    async fn query(
        &self,
        cache: &mut RolloutCache,
        sampling: &SamplingParams,
    ) -> Result<AssistantTurn> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.inner.query(cache, sampling).await
    }
}

#[tokio::test(start_paused = true)]
async fn model_calls_respect_their_permit_count() {
    let inner = ScriptedChatModel::new(vec![
        echo_call("a"),
        echo_call("b"),
        reply(vec![call("c", "finish", json!({"answer": "y"}))]),
    ])
    .without_recording();
    let model = Arc::new(Metered {
        inner,
        in_flight: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    });
    let agent = AgentInteraction::new(
        model.clone(),
        vec![Arc::new(echo_tool()), Arc::new(finish_tool())],
        LoopConfig::default(),
    )
    .unwrap();
    let cfg = RunnerConfig {
        samples_per_task: 5,
        max_concurrent_model_calls: 3,
        ..RunnerConfig::default()
    };
    let runner = Runner::new(agent, cfg).unwrap();
    let mut out = Vec::new();
    let summary = runner
        .run(tasks(4), &CancellationToken::new(), &mut out)
        .await
        .unwrap();
    assert_eq!(summary.exit_reasons[&ExitReason::Finished], 20);
    assert_eq!(model.peak.load(Ordering::SeqCst), 3);
    assert_eq!(summary.turns.total, 60.0);
}

/// Panics when asked to.
#[derive(Debug)]
struct Exploding;

#[async_trait]
impl Tool for Exploding {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "explode",
            "Panics.",
            json!({"type": "object", "properties": {}}),
        )
    }
    async fn call(&self, _args: serde_json::Value, ctx: &ToolContext) -> Result<ToolOutput> {
        if ctx.task.id == "task1" {
            panic!("tool bug in {}", ctx.task.id);
        }
        Ok(ToolOutput::success("fine"))
    }
}

#[tokio::test]
async fn a_panic_or_failed_start_stays_in_its_rollout() {
    let model = ScriptedChatModel::new(vec![
        reply(vec![call("c0", "explode", json!({}))]),
        reply(vec![call("c1", "finish", json!({"answer": "z"}))]),
    ])
    .without_recording();
    let agent = AgentInteraction::new(
        Arc::new(model),
        vec![Arc::new(Exploding), Arc::new(finish_tool())],
        LoopConfig::default(),
    )
    .unwrap();
    let sandboxes = Sandboxes::default();
    let all = sandboxes.0.clone();
    let factory = move |task: &Task| -> Result<Box<dyn Deployment>> {
        let mut d = ScriptedDeployment::new();
        if task.id == "task2" {
            d = d.failing_start();
        }
        all.lock().unwrap().push(d.clone());
        Ok(Box::new(d))
    };
    let runner = Runner::new(agent, RunnerConfig::default())
        .unwrap()
        .with_sandboxes(factory);
    let mut out: Vec<Trajectory> = Vec::new();
    let summary = runner
        .run(tasks(4), &CancellationToken::new(), &mut out)
        .await
        .unwrap();
    assert_eq!(summary.rollouts, 4);
    assert_eq!(summary.exit_reasons[&ExitReason::Finished], 2);
    assert_eq!(summary.exit_reasons[&ExitReason::InternalError], 1);
    assert_eq!(summary.exit_reasons[&ExitReason::SandboxError], 1);
    let panicked = out.iter().find(|t| t.task_id == "task1").unwrap();
    assert!(
        panicked
            .error
            .as_deref()
            .unwrap()
            .contains("tool bug in task1"),
        "{:?}",
        panicked.error
    );
    let failed = out.iter().find(|t| t.task_id == "task2").unwrap();
    assert!(failed
        .error
        .as_deref()
        .unwrap()
        .contains("scripted start failure"));
    assert!(
        sandboxes.all().iter().all(ScriptedDeployment::is_stopped),
        "every sandbox is stopped"
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_stops_running_rollouts_and_records_queued_ones() {
    let model = ScriptedChatModel::new(vec![ScriptedTurn::Hang]).without_recording();
    let agent = AgentInteraction::new(Arc::new(model), vec![], LoopConfig::default()).unwrap();
    let sandboxes = Sandboxes::default();
    let cfg = RunnerConfig {
        max_concurrent_rollouts: 4,
        ..RunnerConfig::default()
    };
    let runner = Runner::new(agent, cfg)
        .unwrap()
        .with_sandboxes(sandboxes.factory(ScriptedDeployment::new));
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        c.cancel();
    });
    let mut out: Vec<Trajectory> = Vec::new();
    let summary = runner.run(tasks(10), &cancel, &mut out).await.unwrap();
    assert_eq!(summary.exit_reasons[&ExitReason::Cancelled], 10);
    assert_eq!(out.len(), 10);
    let all = sandboxes.all();
    assert_eq!(all.len(), 4, "queued rollouts never create a sandbox");
    assert!(all.iter().all(ScriptedDeployment::is_stopped));
}

/// A sink that fails on the third write.
struct FailingSink(usize);

impl TrajectorySink for FailingSink {
    fn write(&mut self, _t: &Trajectory) -> Result<()> {
        self.0 += 1;
        if self.0 == 3 {
            return Err(Error::io("writing", std::io::Error::other("disk full")));
        }
        Ok(())
    }
}

#[tokio::test]
async fn sink_failure_cancels_drains_and_reports() {
    let model = ScriptedChatModel::new(vec![ScriptedTurn::Reply(Message::assistant("hi"))])
        .without_recording();
    let agent = AgentInteraction::new(
        Arc::new(model),
        vec![],
        LoopConfig {
            chat_mode: true,
            ..LoopConfig::default()
        },
    )
    .unwrap();
    let sandboxes = Sandboxes::default();
    let runner = Runner::new(
        agent,
        RunnerConfig {
            max_concurrent_rollouts: 2,
            ..RunnerConfig::default()
        },
    )
    .unwrap()
    .with_sandboxes(sandboxes.factory(ScriptedDeployment::new));
    let err = runner
        .run(tasks(20), &CancellationToken::new(), &mut FailingSink(0))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("disk full"));
    assert!(sandboxes.all().iter().all(ScriptedDeployment::is_stopped));
}

#[tokio::test]
async fn shared_start_permits_bound_sandbox_starts_across_runners() {
    let agent = finishing_agent();
    // One permit, held here: the runner's own limit (16) must not let a sandbox start.
    let starts = Arc::new(tokio::sync::Semaphore::new(1));
    let held = Arc::clone(&starts).acquire_owned().await.unwrap();
    let sandboxes = Sandboxes::default();
    let runner = Runner::new(agent, RunnerConfig::default())
        .unwrap()
        .with_sandboxes(sandboxes.factory(ScriptedDeployment::new))
        .with_start_permits(Arc::clone(&starts));
    let run = tokio::spawn(async move {
        let mut out = Vec::new();
        let summary = runner
            .run(tasks(3), &CancellationToken::new(), &mut out)
            .await
            .unwrap();
        (summary, out)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = |all: &[ScriptedDeployment]| {
        all.iter()
            .filter(|d| d.log().iter().any(|l| l == "start"))
            .count()
    };
    assert_eq!(
        started(&sandboxes.all()),
        0,
        "started without a shared permit"
    );
    drop(held);
    let (summary, out) = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(summary.exit_reasons[&ExitReason::Finished], 3);
    assert_eq!(out.len(), 3);
    assert_eq!(started(&sandboxes.all()), 3);
    assert_eq!(starts.available_permits(), 1, "every permit came back");
}
