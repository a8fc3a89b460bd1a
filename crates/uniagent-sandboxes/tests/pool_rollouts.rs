//! Rollouts through the agent loop and the runner on `faas` sandboxes from two real pool
//! processes: one pool is SIGKILLed mid-batch; its rollouts end as `sandbox_error`, the others
//! finish, and the next batch's leases all go to the surviving pool.

#![cfg(all(feature = "pool", feature = "faas"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pool_common;

use pool_common::deadline::{deadline, DEFAULT};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use uniagent_core::agent::{
    AgentInteraction, CancellationToken, ExitReason, LoopConfig, Trajectory,
};
use uniagent_core::runner::{Runner, RunnerConfig};
use uniagent_core::testing::{BashTool, RecordingTool, ScriptedChatModel, ScriptedTurn};
use uniagent_core::{
    Deployment, EpisodeSignal, Message, Result, RetryConfig, Task, ToolCall, ToolOutput,
};
use uniagent_sandboxes::{FaasConfig, FaasDeployment};

use pool_common::{docker_or_skip, faas_config, unique, PoolProcess, PoolSpec};

fn call(id: &str, name: &str, args: Value) -> ScriptedTurn {
    ScriptedTurn::Reply(Message::assistant_with_calls(
        None,
        vec![ToolCall::new(id, name, args)],
    ))
}

fn agent() -> AgentInteraction {
    let model = ScriptedChatModel::new(vec![
        call("c0", "bash", json!({"command": "sleep 6; echo slept"})),
        call("c1", "finish", json!({})),
    ]);
    let finish = RecordingTool::new("finish", |_| {
        Ok(
            ToolOutput::success("done").with_signal(EpisodeSignal::Finish {
                answer: String::new(),
            }),
        )
    });
    AgentInteraction::new(
        Arc::new(model),
        vec![Arc::new(BashTool), Arc::new(finish)],
        LoopConfig::default(),
    )
    .unwrap()
}

/// Each task's sandbox is a faas lease, remembered for the count.
fn factory(
    config: FaasConfig,
    leased: Arc<Mutex<Vec<Arc<FaasDeployment>>>>,
) -> impl Fn(&Task) -> Result<Box<dyn Deployment>> {
    move |_task: &Task| {
        let d = Arc::new(FaasDeployment::new(config.clone())?);
        leased.lock().unwrap().push(d.clone());
        Ok(Box::new(d) as Box<dyn Deployment>)
    }
}

async fn batch(config: &FaasConfig, n: usize) -> (Vec<Trajectory>, Vec<Arc<FaasDeployment>>) {
    let leased = Arc::new(Mutex::new(Vec::new()));
    let runner = Runner::new(
        agent(),
        RunnerConfig {
            max_concurrent_rollouts: n,
            ..RunnerConfig::default()
        },
    )
    .unwrap()
    .with_sandboxes(factory(config.clone(), leased.clone()));
    let tasks: Vec<Task> = (0..n)
        .map(|i| Task::new(format!("t{i}"), vec![Message::user("sleep")]))
        .collect();
    let mut out = Vec::new();
    runner
        .run(tasks, &CancellationToken::new(), &mut out)
        .await
        .unwrap();
    let leased = leased.lock().unwrap().clone();
    (out, leased)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_killed_mid_batch_fails_its_rollouts_as_sandbox_error_and_the_batch_goes_on() {
    deadline(
        "a_pool_killed_mid_batch_fails_its_rollouts_as_sandbox_error_and_the_batch_goes_on",
        DEFAULT,
        async {
            if !docker_or_skip("rollouts").await {
                return;
            }
            let spec = PoolSpec {
                capacity: 2,
                ..PoolSpec::default()
            };
            let a = Arc::new(Mutex::new(PoolProcess::start(&unique("ra"), &spec, 0)));
            let b = PoolProcess::start(&unique("rb"), &spec, 0);
            let mut config = faas_config(&[&a.lock().unwrap(), &b]);
            config.retry = RetryConfig {
                max_attempts: 2,
                initial_backoff: Duration::from_millis(50),
                max_elapsed: Duration::from_secs(2),
                ..RetryConfig::default()
            };
            // Kill pool A once all four rollouts hold a sandbox and sleep in it.
            let killer = {
                let a = a.clone();
                let name_a = a.lock().unwrap().name.clone();
                let name_b = b.name.clone();
                tokio::spawn(async move {
                    for _ in 0..600 {
                        let held = pool_common::pool_containers(&name_a).await.len()
                            + pool_common::pool_containers(&name_b).await.len();
                        if held == 4 {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    a.lock().unwrap().kill();
                })
            };
            let (out, leased) = batch(&config, 4).await;
            killer.await.unwrap();
            assert_eq!(leased.len(), 4);
            let mut on_a = 0;
            for t in &out {
                if t.exit_reason == ExitReason::SandboxError {
                    on_a += 1;
                } else {
                    assert_eq!(t.exit_reason, ExitReason::Finished, "{t:#?}");
                }
            }
            assert_eq!(on_a, 2, "the two rollouts on the killed pool: {out:#?}");

            // The next batch runs entirely on the surviving pool.
            let (out, _) = batch(&config, 2).await;
            for t in &out {
                assert_eq!(t.exit_reason, ExitReason::Finished, "{t:#?}");
            }
            pool_common::wait_for_containers(&b.name, 0, Duration::from_secs(30)).await;
        },
    )
    .await;
}
