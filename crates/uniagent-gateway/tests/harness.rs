//! `HarnessRollouts` with real processes: small shell harnesses (curl against the gateway
//! session the source gives them) and every way a session can end — reward posted, reward
//! printed by a command, none, a failing reward command, a harness running past its limit
//! (its whole process group killed), a harness that cannot start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use uniagent_core::agent::{ExitReason, TrainingUse, Trajectory};
use uniagent_core::codec::Codec;
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::runner::{RolloutPhase, RolloutSource};
use uniagent_core::{FinishReason, GenerateOutput, GenerateRequest, Message, Task, TokenGenerator};
use uniagent_gateway::harness::{HarnessConfig, HarnessReward, HarnessRollouts};
use uniagent_gateway::GatewayConfig;

/// Answers every request with the same turn and records the sampling it was asked for.
#[derive(Debug)]
struct Fixed {
    ids: Vec<u32>,
    temperatures: Mutex<Vec<f64>>,
}

#[async_trait]
impl TokenGenerator for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }
    async fn generate(&self, request: GenerateRequest) -> uniagent_core::Result<GenerateOutput> {
        self.temperatures
            .lock()
            .unwrap()
            .push(request.sampling.temperature);
        Ok(GenerateOutput {
            token_ids: self.ids.clone(),
            logprobs: Some(vec![-0.5; self.ids.len()]),
            finish_reason: FinishReason::Stop,
            weight_version: Some(3),
        })
    }
}

fn parts() -> (Arc<Codec>, Arc<Fixed>) {
    // The training pipeline's policy codec parses Hermes tool calls.
    let codec = Arc::new(common::codec("qwen2.5").with_tool_parser(ToolCallFormat::Hermes));
    let mut ids = codec.encode("The code is 42.").unwrap();
    ids.push(codec.eos_token_id());
    let generator = Arc::new(Fixed {
        ids,
        temperatures: Mutex::default(),
    });
    (codec, generator)
}

fn tasks(n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| {
            Task::new(
                format!("t{i}"),
                vec![Message::user(format!("What is the code of task {i}?"))],
            )
        })
        .collect()
}

/// One chat completion through the session, with curl.
const ASK: &str = r#"curl -sf "$OPENAI_BASE_URL/chat/completions" -H 'content-type: application/json' \
  -d "{\"model\": \"$UNIAGENT_MODEL\", \"temperature\": 1.7, \"messages\": [{\"role\": \"user\", \"content\": \"$(jq -r '.messages[0].content' "$UNIAGENT_TASK" 2>/dev/null || echo hi)\"}]}" > reply.json"#;

fn sh(script: &str) -> Vec<String> {
    vec!["bash".into(), "-c".into(), script.into()]
}

fn source(codec: Arc<Codec>, config: HarnessConfig) -> HarnessRollouts {
    HarnessRollouts::new(config, codec, GatewayConfig::default()).unwrap()
}

async fn run(
    source: &HarnessRollouts,
    generator: Arc<Fixed>,
    n: usize,
    samples: u32,
) -> Vec<Trajectory> {
    source
        .run(generator, RolloutPhase::sampled(tasks(n), samples, 0.25, 4))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_posted_reward_trains_every_sampled_token_at_the_phase_temperature() {
    let (codec, generator) = parts();
    let script = format!(
        r#"{ASK}
grep -q '42' reply.json || exit 9
curl -sf "$UNIAGENT_GATEWAY/reward" -H 'content-type: application/json' -d '{{"score": 1.0}}'"#
    );
    let source = source(
        codec.clone(),
        HarnessConfig {
            command: sh(&script),
            ..HarnessConfig::default()
        },
    );
    let ts = run(&source, generator.clone(), 2, 3).await;
    let ids: Vec<&str> = ts.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t0:0", "t0:1", "t0:2", "t1:0", "t1:1", "t1:2"]);
    for t in &ts {
        assert_eq!(t.exit_reason, ExitReason::Finished, "{t:?}");
        assert_eq!(t.training_use(), TrainingUse::Train { reward: 1.0 });
        assert!(t.is_success());
        assert_eq!(t.task_id, t.id.split(':').next().unwrap());
        // The sampled turn, id for id, mask 1, the generator's logprobs.
        let sampled: Vec<u32> = t
            .output
            .response_ids
            .iter()
            .zip(&t.output.response_mask)
            .filter(|(_, m)| **m == 1)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(sampled, generator.ids);
        assert_eq!(
            t.output
                .response_logprobs
                .as_ref()
                .unwrap()
                .iter()
                .filter(|l| **l != 0.0)
                .count(),
            generator.ids.len()
        );
        assert_eq!(
            t.output.extra_fields["gateway"]["session"],
            json!(format!("{}", t.id))
        );
    }
    // The harness asked for 1.7; the phase samples at 0.25.
    let temperatures = generator.temperatures.lock().unwrap().clone();
    assert_eq!(temperatures.len(), 6);
    assert!(temperatures.iter().all(|t| *t == 0.25), "{temperatures:?}");
}

#[tokio::test]
async fn a_reward_command_scores_what_the_harness_left_in_its_work_directory() {
    let (codec, generator) = parts();
    // Task t0 is "solved", t1 not; the grader reads the answer file and the task file.
    let harness = format!(
        r#"{ASK}
case "$UNIAGENT_SESSION" in t0:*) echo 42 > "$UNIAGENT_WORKDIR/answer" ;; *) echo 7 > "$UNIAGENT_WORKDIR/answer" ;; esac"#
    );
    let grader = r#"test "$UNIAGENT_HARNESS_STATUS" = "exit status: 0" || exit 4
grep -q '"id": "t' "$UNIAGENT_TASK" || exit 5
if [ "$(cat answer)" = 42 ]; then echo noise; echo '{"score": 1.0, "details": {"by": "grader"}}'; else echo 0; fi"#;
    let source = source(
        codec,
        HarnessConfig {
            command: sh(&harness),
            reward: HarnessReward::Command(sh(grader)),
            ..HarnessConfig::default()
        },
    );
    let ts = run(&source, generator, 2, 1).await;
    assert_eq!(ts.len(), 2);
    assert_eq!(ts[0].training_use(), TrainingUse::Train { reward: 1.0 });
    assert_eq!(ts[0].reward.as_ref().unwrap().details["by"], "grader");
    assert_eq!(ts[1].training_use(), TrainingUse::Train { reward: 0.0 });
    assert!(!ts[1].is_success());
    assert!(ts.iter().all(|t| t.exit_reason == ExitReason::Finished));
}

#[tokio::test]
async fn no_reward_is_an_infrastructure_failure_and_a_broken_grader_a_reward_error() {
    let (codec, generator) = parts();
    let crashed = source(
        codec.clone(),
        HarnessConfig {
            command: sh(&format!("{ASK}\necho 'harness traceback' >&2; exit 3")),
            ..HarnessConfig::default()
        },
    );
    let ts = run(&crashed, generator.clone(), 1, 1).await;
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0].exit_reason, ExitReason::InternalError);
    assert_eq!(ts[0].training_use(), TrainingUse::Drop);
    let why = ts[0].error.as_deref().unwrap();
    assert!(
        why.contains("posted no reward") && why.contains("harness traceback"),
        "{why}"
    );

    let bad_grader = source(
        codec,
        HarnessConfig {
            command: sh(ASK),
            reward: HarnessReward::Command(sh("echo 'all good!'")),
            ..HarnessConfig::default()
        },
    );
    let ts = run(&bad_grader, generator, 1, 1).await;
    assert_eq!(ts[0].exit_reason, ExitReason::RewardError);
    assert_eq!(ts[0].training_use(), TrainingUse::Train { reward: 0.0 });
    assert!(ts[0].error.as_deref().unwrap().contains("all good!"));
}

#[tokio::test]
async fn a_harness_past_its_limit_is_killed_with_everything_it_started() {
    let (codec, generator) = parts();
    let pids = tempfile::tempdir().unwrap();
    let pid_file = pids.path().join("child.pid");
    let script = format!("{ASK}\nsleep 300 & echo $! > {}\nwait", pid_file.display());
    let source = source(
        codec,
        HarnessConfig {
            command: sh(&script),
            timeout: Duration::from_secs(3),
            ..HarnessConfig::default()
        },
    );
    let ts = run(&source, generator, 1, 1).await;
    assert_eq!(ts.len(), 1, "the chain sampled before the limit is kept");
    assert_eq!(ts[0].exit_reason, ExitReason::WallClockTimeout);
    assert_eq!(ts[0].training_use(), TrainingUse::Train { reward: 0.0 });
    assert!(!ts[0].output.response_ids.is_empty());
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Killed with its group (a zombie at most, until init reaps it). SIGKILL takes effect when
    // the process next runs: on a busy machine it is briefly runnable (`R`) on its way out, so
    // its end is awaited, with a deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the harness's background child survived: {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_harness_that_cannot_start_fails_the_phase_with_a_clear_error() {
    let (codec, generator) = parts();
    let source = source(
        codec,
        HarnessConfig {
            command: vec!["/nonexistent/agent".into()],
            ..HarnessConfig::default()
        },
    );
    let e = source
        .run(generator, RolloutPhase::sampled(tasks(2), 2, 0.0, 2))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot start `/nonexistent/agent`"), "{e}");
    assert!(HarnessConfig::default().validate().is_err(), "no command");
}
