//! The loop over a real codec (Qwen2.5 tokenizer and chat template fixtures) and a scripted
//! token generator: random episodes give trajectories whose ids equal the codec's full render
//! of the conversation and whose mask is 1 exactly on the sampled tokens. Every episode is
//! recorded as a cassette and replays identically.

// Test helpers may unwrap (a panic fails the test); core's `Error` is large by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::codec;
use proptest::prelude::*;
use serde_json::json;
use uniagent_core::agent::{
    AgentInteraction, ExitReason, LoopConfig, RolloutControl, TokenChatModel,
};
use uniagent_core::cassette::{replay, Cassette, RecordGenerator, Recorder, ReplaySetup, ToolMode};
use uniagent_core::codec::{messages_to_json, tools_to_json, ChatInput, Codec};
use uniagent_core::layer::With;
use uniagent_core::testing::{
    RecordingTool, ScriptedTokenGenerator, ScriptedTurn, SCRIPTED_LOGPROB,
};
use uniagent_core::{LengthLimits, Message, Task, Tool, ToolCall, ToolOutput, ToolSpec};

fn echo_spec() -> ToolSpec {
    ToolSpec::function(
        "echo",
        "Echo a text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    )
}

#[derive(Debug, Clone)]
enum TurnKind {
    Calls(String, Vec<String>),
    NoCall(String),
    Malformed,
}

fn turn_kind() -> impl Strategy<Value = TurnKind> {
    let word = "[a-z]{1,8}( [a-z]{1,8}){0,3}";
    prop_oneof![
        4 => (prop_oneof![Just(String::new()), word.prop_map(String::from)], proptest::collection::vec("[a-z0-9 ]{1,12}", 1..3))
            .prop_map(|(c, calls)| TurnKind::Calls(c, calls)),
        1 => word.prop_map(TurnKind::NoCall),
        1 => Just(TurnKind::Malformed),
    ]
}

/// The scripted turn of `kind`: what a policy samples (tool calls in Hermes form, as the
/// template renders them) or a malformed call.
fn scripted(kind: &TurnKind) -> ScriptedTurn {
    match kind {
        TurnKind::Calls(content, calls) => {
            let calls = calls
                .iter()
                .enumerate()
                .map(|(i, text)| ToolCall::new(format!("call_{i}"), "echo", json!({"text": text})))
                .collect();
            let content = (!content.is_empty()).then(|| content.clone());
            ScriptedTurn::Reply(Message::assistant_with_calls(content, calls))
        }
        TurnKind::NoCall(text) => ScriptedTurn::Reply(Message::assistant(text.clone())),
        TurnKind::Malformed => ScriptedTurn::FormatError {
            content: "<tool_call>\n{\"name\": \"echo\"".to_owned(),
            error: "unterminated tool call".to_owned(),
        },
    }
}

async fn run_episode(
    kinds: &[TurnKind],
    with_system: bool,
) -> (
    uniagent_core::agent::Trajectory,
    Arc<ScriptedTokenGenerator>,
    Cassette,
) {
    let codec = codec();
    let script = kinds.iter().map(scripted).collect();
    let generator = Arc::new(ScriptedTokenGenerator::new(codec.clone(), script));
    let recorder = Recorder::new();
    let recording = RecordGenerator::new(generator.clone(), Arc::clone(&recorder));
    let model = TokenChatModel::new(Arc::new(recording), codec, LengthLimits::default());
    let echo = RecordingTool::with_spec(echo_spec(), |a| {
        Ok(ToolOutput::success(format!(
            "echoed: {}",
            a["text"].as_str().unwrap_or_default()
        )))
    });
    let cfg = LoopConfig {
        max_turns: kinds.len() as u32,
        format_error_budget: 100,
        ..LoopConfig::default()
    };
    let echo: Arc<dyn Tool> = Arc::new(echo);
    let tools = vec![echo.with(&recorder)];
    let agent = AgentInteraction::new(Arc::new(model), tools, cfg.clone()).unwrap();
    let mut messages = vec![Message::user("Echo some things.")];
    if with_system {
        messages.insert(0, Message::system("You are a careful agent."));
    }
    let task = Task::new("p", messages);
    let t = agent
        .run(Arc::new(task.clone()), 0, None, &RolloutControl::default())
        .await;
    let cassette = recorder.cassette(
        &t,
        &task,
        vec![echo_spec()],
        cfg,
        "scripted-generator",
        serde_json::Value::Null,
    );
    (t, generator, cassette)
}

/// The first divergence of `cassette`'s replay with recorded tools (`None`: identical).
async fn replayed(cassette: &Cassette) -> Option<uniagent_core::cassette::Divergence> {
    let setup = ReplaySetup {
        codec: codec(),
        limits: LengthLimits::default(),
        tools: ToolMode::Recorded,
    };
    replay(cassette, setup).await.unwrap().divergence
}

fn full_render(codec: &Codec, t: &uniagent_core::agent::Trajectory) -> Vec<u32> {
    codec
        .render_ids(&ChatInput {
            messages: messages_to_json(&t.messages).unwrap(),
            tools: tools_to_json(&[echo_spec()]).unwrap(),
            add_generation_prompt: true,
            template_kwargs: serde_json::Map::new(),
        })
        .unwrap()
}

#[tokio::test]
async fn a_tool_episode_over_the_real_codec_matches_the_full_render() {
    let kinds = vec![
        TurnKind::Calls("Let me check".into(), vec!["hello world".into()]),
        TurnKind::Calls(String::new(), vec!["a".into(), "b".into()]),
    ];
    let (t, generator, cassette) = run_episode(&kinds, true).await;
    assert_eq!(t.exit_reason, ExitReason::MaxTurns, "{:?}", t.error);
    assert_eq!(replayed(&cassette).await, None);
    let codec = codec();
    let mut ids = t.output.prompt_ids.clone();
    ids.extend(&t.output.response_ids);
    assert_eq!(ids, full_render(&codec, &t));
    // Every request carried the whole context so far, sticky to the trajectory.
    let requests = generator.requests();
    assert!(requests
        .iter()
        .all(|r| ids.starts_with(&r.prompt_ids) && r.session_id.as_deref() == Some("p:0")));
    assert_eq!(requests[0].stop_token_ids, codec.stop_token_ids());
    // The parsed calls ran: two turns, three calls.
    assert_eq!(t.counts.tool_calls, 3);
    // Sampled tokens keep the generator's logprobs; inserted ones have 0.0.
    let first = t.output.response_mask.iter().position(|&m| m == 1).unwrap();
    assert_eq!(
        t.output.response_logprobs.as_ref().unwrap()[first],
        SCRIPTED_LOGPROB
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_episodes_equal_the_full_render_oracle(
        kinds in proptest::collection::vec(turn_kind(), 1..5),
        with_system in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (t, generator, cassette) = rt.block_on(run_episode(&kinds, with_system));
        prop_assert_eq!(t.exit_reason, ExitReason::MaxTurns, "{:?}", t.error);
        prop_assert_eq!(rt.block_on(replayed(&cassette)), None);
        let codec = codec();
        let mut ids = t.output.prompt_ids.clone();
        ids.extend(&t.output.response_ids);
        prop_assert_eq!(&ids, &full_render(&codec, &t));
        // Mask 1 exactly on what the generator sampled, in order, with its logprobs.
        let sampled: Vec<u32> = t.output.response_ids.iter().zip(&t.output.response_mask)
            .filter(|(_, m)| **m == 1).map(|(id, _)| *id).collect();
        let mut expected = Vec::new();
        for kind in &kinds {
            expected.extend(generator.turn_ids(&scripted(kind)).unwrap());
            expected.push(codec.eos_token_id());
        }
        prop_assert_eq!(sampled, expected);
        let lps = t.output.response_logprobs.as_ref().unwrap();
        prop_assert!(t.output.response_mask.iter().zip(lps).all(|(&m, &lp)| (m == 1) == (lp != 0.0)));
        let format_errors = kinds.iter().filter(|k| !matches!(k, TurnKind::Calls(..))).count() as u32;
        prop_assert_eq!(t.counts.format_errors, format_errors);
    }
}
