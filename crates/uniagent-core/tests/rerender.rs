//! The trajectory record of a rollout over the real Qwen3 codec that is *not* append-only:
//! the policy samples an empty `<think></think>` block, which Qwen3's template drops from
//! assistant turns once they are no longer last. The record carries the run-length encoded
//! token sources and the template's full render of the messages (`rerender_ids`), which then
//! differs from the token stream; an append-only rollout carries no re-render.

// Test helpers may unwrap (a panic fails the test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::agent::{
    AgentInteraction, ExitReason, LoopConfig, RolloutControl, TokenChatModel, Trajectory,
};
use uniagent_core::codec::{messages_to_json, tools_to_json, ChatInput, Codec};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::testing::RecordingTool;
use uniagent_core::{
    FinishReason, GenerateOutput, GenerateRequest, LengthLimits, Message, Result, Task,
    TokenGenerator, TokenSource, TokenSourceRuns, ToolOutput, ToolSpec,
};

fn codec() -> Arc<Codec> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenizers/qwen3");
    Arc::new(
        Codec::from_dir(dir)
            .unwrap()
            .with_tool_parser(ToolCallFormat::Hermes),
    )
}

/// Samples the canonical tokens of each text in turn, then the stop id.
#[derive(Debug)]
struct Script {
    codec: Arc<Codec>,
    texts: Vec<String>,
    turn: Mutex<usize>,
}

#[async_trait]
impl TokenGenerator for Script {
    fn name(&self) -> &str {
        "script"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let turn = {
            let mut t = self.turn.lock().unwrap();
            *t += 1;
            *t - 1
        };
        let mut ids = self.codec.encode(&self.texts[turn])?;
        ids.push(request.stop_token_ids[0]);
        Ok(GenerateOutput {
            logprobs: Some(vec![-0.25; ids.len()]),
            token_ids: ids,
            finish_reason: FinishReason::Stop,
            weight_version: Some(1),
        })
    }
}

fn echo_spec() -> ToolSpec {
    ToolSpec::function(
        "echo",
        "Echo a text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    )
}

async fn episode(codec: &Arc<Codec>, texts: &[&str]) -> Trajectory {
    let generator = Arc::new(Script {
        codec: codec.clone(),
        texts: texts.iter().map(|t| (*t).to_owned()).collect(),
        turn: Mutex::default(),
    });
    let model = TokenChatModel::new(generator, codec.clone(), LengthLimits::default());
    let echo = RecordingTool::with_spec(echo_spec(), |a| {
        Ok(ToolOutput::success(format!(
            "echoed: {}",
            a["text"].as_str().unwrap_or_default()
        )))
    });
    let cfg = LoopConfig {
        max_turns: texts.len() as u32,
        ..LoopConfig::default()
    };
    let agent = AgentInteraction::new(Arc::new(model), vec![Arc::new(echo)], cfg).unwrap();
    let task = Task::new("q", vec![Message::user("Echo hi, then stop.")]);
    agent
        .run(Arc::new(task), 0, None, &RolloutControl::default())
        .await
}

const CALL: &str =
    "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}}\n</tool_call>";

fn stream(t: &Trajectory) -> Vec<u32> {
    let mut ids = t.output.prompt_ids.clone();
    ids.extend(&t.output.response_ids);
    ids
}

/// The template's render of the whole conversation: the episode ended at the turn limit
/// after a tool result, so the trace ends with the generation prompt.
fn full_render(codec: &Codec, messages: &[Message]) -> Vec<u32> {
    codec
        .render_ids(&ChatInput {
            messages: messages_to_json(messages).unwrap(),
            tools: tools_to_json(&[echo_spec()]).unwrap(),
            add_generation_prompt: true,
            template_kwargs: serde_json::Map::new(),
        })
        .unwrap()
}

#[tokio::test]
async fn a_dropped_empty_think_block_is_recorded_with_the_full_render() {
    let codec = codec();
    let first = format!("<think>\n\n</think>\n\n{CALL}");
    let t = episode(&codec, &[&first, &first]).await;
    assert_eq!(t.exit_reason, ExitReason::MaxTurns, "{:?}", t.error);
    let rerender = t
        .output
        .rerender_ids
        .clone()
        .expect("not append-only: the re-render is recorded");
    // Exactly the codec's full render of the traced conversation.
    assert_eq!(rerender, full_render(&codec, &t.messages));
    let stream = stream(&t);
    assert_ne!(rerender, stream);
    // The difference is the turns' empty think blocks, which the template drops once a turn
    // is no longer last; nothing else.
    let think = codec.encode("<think>\n\n</think>\n\n").unwrap();
    let mut without = stream.clone();
    let mut dropped = 0;
    while let Some(at) = without
        .windows(think.len())
        .position(|w| w == think.as_slice())
    {
        without.drain(at..at + think.len());
        dropped += 1;
    }
    assert_eq!(dropped, 2);
    assert_eq!(without, rerender);

    // Sources: one per token, sampled exactly where the mask is 1, prompt first.
    let v = serde_json::to_value(&t).unwrap();
    let runs: TokenSourceRuns = serde_json::from_value(v["token_sources"].clone()).unwrap();
    let sources = runs.expand();
    assert_eq!(sources.len(), stream.len());
    let prompt = t.output.prompt_ids.len();
    assert!(sources[..prompt].iter().all(|s| *s == TokenSource::Prompt));
    for (s, m) in sources[prompt..].iter().zip(&t.output.response_mask) {
        assert_eq!(*s == TokenSource::Sampled, *m == 1);
    }
    assert!(sources.contains(&TokenSource::Observation));
    assert!(sources.contains(&TokenSource::TemplateGlue));
    // Two sampled turns around one tool result: a handful of runs, not one entry per token.
    assert!(runs.runs().len() <= 8, "{:?}", runs.runs());
    assert_eq!(v["rerender_ids"], json!(rerender));
    // The record still loads as a trajectory.
    let back: Trajectory = serde_json::from_value(v).unwrap();
    assert_eq!(back.output.rerender_ids, Some(rerender));
}

#[tokio::test]
async fn an_append_only_rollout_carries_no_rerender() {
    let codec = codec();
    let first = format!("<think>\nEcho it.\n</think>\n\n{CALL}");
    let t = episode(&codec, &[&first, &first]).await;
    assert_eq!(t.exit_reason, ExitReason::MaxTurns, "{:?}", t.error);
    assert_eq!(stream(&t), full_render(&codec, &t.messages));
    let v = serde_json::to_value(&t).unwrap();
    assert!(v.get("rerender_ids").is_none());
    let runs: Vec<Value> = v["token_sources"].as_array().unwrap().clone();
    assert_eq!(runs[0][0], "prompt");
}

/// A trace that ends with a sampled turn is compared through that turn's end-of-turn token:
/// the newline Qwen's template puts after it belongs to no turn yet.
#[test]
fn a_trace_ending_with_a_sampled_turn_rerenders_through_its_end_of_turn() {
    let codec = codec();
    let mut cache = codec
        .start(
            "r",
            vec![Message::user("Echo hi.")],
            vec![echo_spec()],
            serde_json::Map::new(),
            LengthLimits::default(),
        )
        .unwrap();
    let mut turn = codec
        .encode(&format!("<think>\n\n</think>\n\n{CALL}"))
        .unwrap();
    turn.push(codec.eos_token_id());
    codec
        .append_sampled(&mut cache, &turn, &vec![-0.5; turn.len()], None)
        .unwrap();
    let tool = Message::tool("call_0", "echoed: hi");
    codec.append_messages(&mut cache, &[tool]).unwrap();
    codec
        .append_sampled(&mut cache, &turn, &vec![-0.5; turn.len()], None)
        .unwrap();
    assert!(!cache.append_only());
    let rerender = codec.rerender_ids(&cache).unwrap().unwrap();
    assert_eq!(rerender.last(), Some(&codec.eos_token_id()));
    // The last turn keeps its think block, the first loses it.
    let stream = cache.tokens().unwrap().all_ids();
    let think = codec.encode("<think>\n\n</think>\n\n").unwrap();
    assert_eq!(stream.len() - rerender.len(), think.len());
    assert!(stream.ends_with(&rerender[rerender.len() - turn.len()..]));
}
