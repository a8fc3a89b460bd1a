//! Cassettes over the real codec (Qwen2.5 fixtures): concurrent rollouts recorded through the
//! runner replay token for token with recorded tools and with live ones; a tampered sampled
//! token, a tampered observation and a non-deterministic tool are reported where they happen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::codec;
use serde_json::{json, Value};
use uniagent_core::agent::{CancellationToken, ExitReason, LoopConfig, TokenChatModel, Trajectory};
use uniagent_core::cassette::{
    replay, Cassette, Divergence, RecordGenerator, Recorder, ReplaySetup, Step, ToolMode,
    ToolOutcome,
};
use uniagent_core::codec::Codec;
use uniagent_core::layer::With;
use uniagent_core::runner::{Runner, RunnerConfig};
use uniagent_core::testing::{cassette_violations, RecordingTool};
use uniagent_core::{
    agent::AgentInteraction, EpisodeSignal, FinishReason, GenerateOutput, GenerateRequest,
    LengthLimits, Message, Result, Task, TokenGenerator, Tool, ToolOutput,
};

/// Turn 0 reads key `a`, turn 1 finishes; logprobs differ per rollout and turn.
#[derive(Debug)]
struct Policy {
    codec: Arc<Codec>,
    turns: Mutex<HashMap<String, usize>>,
}

#[async_trait]
impl TokenGenerator for Policy {
    fn name(&self) -> &str {
        "scripted-policy"
    }
    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let session = request.session_id.clone().unwrap();
        let turn = {
            let mut t = self.turns.lock().unwrap();
            let n = t.entry(session.clone()).or_default();
            *n += 1;
            *n - 1
        };
        let text = match turn {
            0 => "Reading.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"key\": \"a\"}}\n</tool_call>",
            _ => "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"answer\": \"42\"}}\n</tool_call>",
        };
        let mut ids = self.codec.encode(text)?;
        ids.push(request.stop_token_ids[0]);
        let salt = session.len() as f32 + turn as f32;
        Ok(GenerateOutput {
            logprobs: Some((0..ids.len()).map(|i| -0.001 * (i as f32 + salt)).collect()),
            token_ids: ids,
            finish_reason: FinishReason::Stop,
            weight_version: Some(3),
        })
    }
}

/// `read` (deterministic, or counting its calls) and `finish`.
fn tools(counting: bool) -> Vec<Arc<dyn Tool>> {
    let calls = AtomicU64::new(0);
    let read = RecordingTool::new("read", move |args| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let key = args["key"].as_str().unwrap_or_default();
        Ok(ToolOutput::success(if counting {
            format!("value of {key}: call {n}")
        } else {
            format!("value of {key}: 7")
        }))
    });
    let finish = RecordingTool::new("finish", |args| {
        let answer = args["answer"].as_str().unwrap_or_default().to_owned();
        Ok(ToolOutput::success("done").with_signal(EpisodeSignal::Finish { answer }))
    });
    vec![Arc::new(read), Arc::new(finish)]
}

fn loop_config() -> LoopConfig {
    LoopConfig {
        max_turns: 4,
        ..LoopConfig::default()
    }
}

/// Records 2 tasks x 2 samples, 4 at once; returns the cassettes by rollout id.
async fn record(counting: bool) -> (HashMap<String, Cassette>, Vec<Trajectory>) {
    let codec = codec();
    let recorder = Recorder::new();
    let policy = Arc::new(Policy {
        codec: codec.clone(),
        turns: Mutex::default(),
    });
    let generator = RecordGenerator::new(policy, Arc::clone(&recorder));
    let model = TokenChatModel::new(Arc::new(generator), codec, LengthLimits::default());
    let tools = tools(counting)
        .into_iter()
        .map(|tool| tool.with(&recorder))
        .collect();
    let agent = AgentInteraction::new(Arc::new(model), tools, loop_config()).unwrap();
    let specs = agent.tool_specs().to_vec();
    let runner = Runner::new(
        agent,
        RunnerConfig {
            samples_per_task: 2,
            max_concurrent_rollouts: 4,
            ..RunnerConfig::default()
        },
    )
    .unwrap();
    let tasks: Vec<Task> = ["x", "y"]
        .iter()
        .map(|id| Task::new(*id, vec![Message::user(format!("Task {id}: read a."))]))
        .collect();
    let mut out: Vec<Trajectory> = Vec::new();
    runner
        .run(tasks.clone(), &CancellationToken::new(), &mut out)
        .await
        .unwrap();
    let mut cassettes = HashMap::new();
    for t in &out {
        let task = tasks.iter().find(|k| k.id == t.task_id).unwrap();
        let c = recorder.cassette(
            t,
            task,
            specs.clone(),
            loop_config(),
            "scripted-policy",
            Value::Null,
        );
        cassettes.insert(t.id.clone(), c);
    }
    assert_eq!(recorder.in_flight(), 0);
    (cassettes, out)
}

fn setup(mode: ToolMode) -> ReplaySetup {
    ReplaySetup {
        codec: codec(),
        limits: LengthLimits::default(),
        tools: mode,
    }
}

fn live(counting: bool) -> ToolMode {
    ToolMode::Live {
        tools: tools(counting),
        sandboxes: None,
    }
}

#[tokio::test]
async fn recorded_rollouts_replay_token_for_token() {
    let (cassettes, trajectories) = record(false).await;
    assert_eq!(cassettes.len(), 4);
    for t in &trajectories {
        assert_eq!(t.exit_reason, ExitReason::Finished, "{:?}", t.error);
        let c = &cassettes[&t.id];
        // Two generations and two tool calls, in order, through one JSON line.
        let kinds: Vec<&str> = c
            .steps
            .iter()
            .map(|s| match s {
                Step::Generate { .. } | Step::GenerateError { .. } => "generate",
                Step::Tool { name, .. } => name.as_str(),
            })
            .collect();
        assert_eq!(kinds, ["generate", "read", "generate", "finish"]);
        assert!(c
            .generations()
            .all(|(r, _)| r.session_id.as_deref() == Some(t.id.as_str())));
        // The line writers append is version 1 of the schema, and reads back.
        let line = c.to_line().unwrap();
        let value: Value = serde_json::from_slice(&line).unwrap();
        let violations = cassette_violations(&value);
        assert!(violations.is_empty(), "{violations:#?}");
        let c = Cassette::from_json(std::str::from_utf8(&line).unwrap()).unwrap();
        for mode in [ToolMode::Recorded, live(false)] {
            let outcome = replay(&c, setup(mode)).await.unwrap();
            assert_eq!(outcome.divergence, None);
            assert_eq!(
                outcome.trajectory.output.response_ids,
                t.output.response_ids
            );
            assert_eq!(
                outcome.trajectory.output.response_logprobs,
                t.output.response_logprobs
            );
        }
    }
}

#[tokio::test]
async fn a_tampered_sampled_token_diverges_at_the_next_prompt() {
    let (cassettes, _) = record(false).await;
    let mut c = cassettes["y:1"].clone();
    let prompt_len = c.trajectory.prompt_ids.len();
    let Step::Generate { output, .. } = &mut c.steps[0] else {
        panic!("first step is a generation")
    };
    output.token_ids[0] += 1; // in the text before the call: the call still parses
    let outcome = replay(&c, setup(ToolMode::Recorded)).await.unwrap();
    let Some(Divergence::Prompt {
        turn,
        position,
        expected,
        got,
    }) = outcome.divergence
    else {
        panic!("{:?}", outcome.divergence)
    };
    assert_eq!((turn, position), (1, prompt_len));
    assert_eq!(got, expected.map(|e| e + 1));
    assert_eq!(outcome.trajectory.exit_reason, ExitReason::ModelError);
}

#[tokio::test]
async fn a_tampered_observation_diverges_where_it_enters_the_prompt() {
    let (cassettes, _) = record(false).await;
    let mut c = cassettes["x:0"].clone();
    let Step::Tool {
        outcome: ToolOutcome::Output { output },
        ..
    } = &mut c.steps[1]
    else {
        panic!("second step is the read")
    };
    output.content = "value of a: 8".into();
    let outcome = replay(&c, setup(ToolMode::Recorded)).await.unwrap();
    let Some(Divergence::Prompt { turn, position, .. }) = outcome.divergence else {
        panic!("{:?}", outcome.divergence)
    };
    assert_eq!(turn, 1);
    // Inside the observation: after the prompt and the first turn's sampled tokens.
    let first_turn = c.generations().next().unwrap().1.token_ids.len();
    assert!(
        position > c.trajectory.prompt_ids.len() + first_turn,
        "{position}"
    );
    assert_eq!(
        c.trajectory.prompt_ids.len() + c.trajectory.response_ids.len(),
        c.generations().nth(1).unwrap().0.prompt_ids.len()
            + c.generations().nth(1).unwrap().1.token_ids.len()
    );
}

#[tokio::test]
async fn tampered_arguments_and_a_non_deterministic_tool_are_reported() {
    let (cassettes, _) = record(false).await;
    let mut c = cassettes["x:1"].clone();
    if let Step::Tool { arguments, .. } = &mut c.steps[1] {
        *arguments = json!({"key": "b"});
    }
    let outcome = replay(&c, setup(ToolMode::Recorded)).await.unwrap();
    assert!(
        matches!(&outcome.divergence, Some(Divergence::Arguments { turn: 0, tool, .. }) if tool == "read"),
        "{:?}",
        outcome.divergence
    );

    // Live: each replay's fresh counting tool answers `call 0`; the four recorded rollouts
    // got `call 0` to `call 3`, so exactly three diverge, at the read of turn 0.
    let (cassettes, _) = record(true).await;
    let diverged: Vec<Divergence> = {
        let mut v = Vec::new();
        for c in cassettes.values() {
            if let Some(d) = replay(c, setup(live(true))).await.unwrap().divergence {
                v.push(d);
            }
        }
        v
    };
    assert_eq!(diverged.len(), 3, "{diverged:?}");
    for d in diverged {
        let Divergence::Observation {
            turn,
            tool,
            expected,
            got,
        } = d
        else {
            panic!("{d:?}")
        };
        assert_eq!((turn, tool.as_str()), (0, "read"));
        assert!(got.ends_with("value of a: call 0"), "{got}");
        assert!(expected.contains("value of a: call ") && expected != got);
    }
}
