//! Incremental tokenization: the stream built turn by turn equals the full render for
//! append-only templates, sampled tokens are never rewritten, and the cache invariants hold.
#![cfg(feature = "codec")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns unwrap too

mod codec_common;

use std::sync::OnceLock;

use codec_common::tokenizer_dir;
use proptest::prelude::*;
use serde_json::{json, Value};
use uniagent_core::codec::{messages_to_json, ChatInput, Codec};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::{Error, LengthLimits, Message, RolloutCache, TokenSource, ToolSpec};

fn qwen25() -> &'static Codec {
    static C: OnceLock<Codec> = OnceLock::new();
    C.get_or_init(|| {
        Codec::from_dir(tokenizer_dir("qwen2.5"))
            .unwrap()
            .with_tool_parser(ToolCallFormat::Hermes)
    })
}

fn qwen3() -> &'static Codec {
    static C: OnceLock<Codec> = OnceLock::new();
    C.get_or_init(|| {
        Codec::from_dir(tokenizer_dir("qwen3"))
            .unwrap()
            .with_tool_parser(ToolCallFormat::Hermes)
    })
}

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "bash", "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}),
        json!({"type": "function", "function": {"name": "finish", "description": "Done.",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "number"}}}}}),
    ]
}

fn typed_tools() -> Vec<ToolSpec> {
    tools()
        .into_iter()
        .map(|t| serde_json::from_value(t).unwrap())
        .collect()
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        proptest::collection::vec(
            prop_oneof![
                Just("a"),
                Just("Hello"),
                Just(" "),
                Just("\n"),
                Just("\n\n"),
                Just("é"),
                Just("中文"),
                Just("😀"),
                Just("<"),
                Just(">"),
                Just("{\""),
                Just("1.5"),
                Just("\t"),
                Just("ls -la"),
                Just("'")
            ],
            1..12
        )
        .prop_map(|parts| parts.concat()),
        "[a-z ]{200,400}",
    ]
}

fn tool_call(idx: usize) -> impl Strategy<Value = Value> {
    (any::<bool>(), text(), -1000i64..1000).prop_map(move |(bash, t, n)| {
        let args = if bash {
            json!({"command": t})
        } else {
            json!({"answer": t, "score": n as f64 / 8.0})
        };
        json!({"id": format!("call_{idx}"), "type": "function",
               "function": {"name": if bash { "bash" } else { "finish" }, "arguments": args}})
    })
}

#[derive(Debug, Clone)]
enum Step {
    /// An assistant turn with text and 0..3 tool calls, followed by one tool result per call,
    /// or by a user message when there are no calls.
    Turn {
        content: Option<String>,
        reasoning: Option<String>,
        calls: Vec<Value>,
        results: Vec<String>,
        user: String,
    },
}

fn step(with_reasoning: bool) -> impl Strategy<Value = Step> {
    (
        proptest::option::of(text()),
        if with_reasoning {
            proptest::option::of(text()).boxed()
        } else {
            Just(None).boxed()
        },
        proptest::collection::vec(tool_call(0), 0..3),
        proptest::collection::vec(text(), 3),
        text(),
    )
        .prop_map(|(content, reasoning, calls, results, user)| {
            let calls = calls
                .into_iter()
                .enumerate()
                .map(|(i, mut c)| {
                    c["id"] = json!(format!("call_{i}"));
                    c
                })
                .collect();
            Step::Turn {
                content,
                reasoning,
                calls,
                results,
                user,
            }
        })
}

/// A conversation: optional system, a user task, then steps.
fn conversation(with_reasoning: bool) -> impl Strategy<Value = Vec<Value>> {
    conversation_with(with_reasoning, false)
}

/// `canonical`: assistant contents do not start with whitespace, which would merge with the
/// generation prompt's trailing newline in a full render (a tokenization the policy cannot
/// sample across).
fn conversation_with(with_reasoning: bool, canonical: bool) -> impl Strategy<Value = Vec<Value>> {
    (proptest::option::of(text()), text(), proptest::collection::vec(step(with_reasoning), 1..5)).prop_map(
        move |(system, task, steps)| {
            let mut msgs = Vec::new();
            if let Some(s) = system {
                msgs.push(json!({"role": "system", "content": s}));
            }
            msgs.push(json!({"role": "user", "content": task}));
            for Step::Turn { content, reasoning, calls, results, user } in steps {
                // Qwen2.5 (like transformers) rejects `content: null` without tool calls.
                let content = if calls.is_empty() { Some(content.unwrap_or_default()) } else { content };
                let content = if canonical { content.map(|c| c.trim_start().to_owned()) } else { content };
                let mut m = json!({"role": "assistant", "content": content});
                if let Some(r) = reasoning {
                    m["reasoning_content"] = json!(r);
                }
                if !calls.is_empty() {
                    m["tool_calls"] = json!(calls);
                }
                msgs.push(m);
                if calls.is_empty() {
                    msgs.push(json!({"role": "user", "content": user}));
                } else {
                    for (i, _) in calls.iter().enumerate() {
                        msgs.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": results[i]}));
                    }
                }
            }
            msgs
        },
    )
}

fn input(messages: &[Value], add_generation_prompt: bool) -> ChatInput {
    ChatInput {
        messages: messages.to_vec(),
        tools: tools(),
        add_generation_prompt,
        template_kwargs: Default::default(),
    }
}

/// The sampled span of assistant `i`, straight from the definition: ids after the prompt render
/// through the first eos, in the render up to and including the assistant message.
fn sampled_span(codec: &Codec, msgs: &[Value], i: usize) -> Vec<u32> {
    let prompt_text = codec.render(&input(&msgs[..i], true)).unwrap();
    let full_text = codec.render(&input(&msgs[..=i], false)).unwrap();
    let prompt = codec.encode(&prompt_text).unwrap();
    let full = codec.encode(&full_text).unwrap();
    let mut span = match full.strip_prefix(prompt.as_slice()) {
        Some(rest) => rest.to_vec(),
        // The turn's first token merges with the generation prompt: tokenize its text alone.
        None => codec
            .encode(full_text.strip_prefix(prompt_text.as_str()).unwrap())
            .unwrap(),
    };
    if let Some(end) = span.iter().position(|id| *id == codec.eos_token_id()) {
        span.truncate(end + 1);
    }
    span
}

fn masked(ids: &[u32], mask: &[u8]) -> Vec<u32> {
    ids.iter()
        .zip(mask)
        .filter(|(_, m)| **m == 1)
        .map(|(id, _)| *id)
        .collect()
}

/// Drives the typed API like a rollout; returns the cache. Checks after every operation.
fn roll_out(codec: &Codec, msgs: &[Value], check_full: bool) -> RolloutCache {
    let typed: Vec<Message> = msgs
        .iter()
        .map(|m| serde_json::from_value(m.clone()).unwrap())
        .collect();
    let first = msgs.iter().position(|m| m["role"] == "assistant").unwrap();
    let mut cache = codec
        .start(
            "p",
            typed[..first].to_vec(),
            typed_tools(),
            Default::default(),
            LengthLimits::default(),
        )
        .unwrap();
    let mut i = first;
    let mut sampled_all = Vec::new();
    while i < msgs.len() {
        if msgs[i]["role"] == "assistant" {
            let span = sampled_span(codec, msgs, i);
            let lps: Vec<f32> = (0..span.len()).map(|k| -(k as f32) / 16.0).collect();
            let turn = codec
                .append_sampled(&mut cache, &span, &lps, Some(7))
                .unwrap();
            assert!(turn.stopped);
            sampled_all.extend_from_slice(&span);
            if check_full && cache.append_only() {
                let full = codec.render_ids(&ChatInput {
                    messages: messages_to_json(&typed[..=i]).unwrap(),
                    ..input(&[], false)
                });
                let full = full.unwrap();
                let have = cache.tokens().unwrap().all_ids();
                assert!(
                    full.starts_with(&have),
                    "after assistant {i}:\n{:?}\n{:?}",
                    codec.decode(&full, false).unwrap(),
                    codec.decode(&have, false).unwrap()
                );
            }
            i += 1;
        } else {
            let end = msgs[i..]
                .iter()
                .position(|m| m["role"] == "assistant")
                .map_or(msgs.len(), |k| i + k);
            codec.append_messages(&mut cache, &typed[i..end]).unwrap();
            if check_full && cache.append_only() {
                let full = codec.render_ids(&input(&msgs[..end], true)).unwrap();
                assert_eq!(
                    full,
                    cache.tokens().unwrap().all_ids(),
                    "after messages {i}..{end}"
                );
            }
            i = end;
        }
        cache.check_invariants().unwrap();
    }
    let t = cache.tokens().unwrap();
    assert_eq!(masked(&t.response_ids, &t.response_mask), sampled_all);
    for ((m, lp), p) in t
        .response_mask
        .iter()
        .zip(&t.response_logprobs)
        .zip(&t.provenance)
    {
        assert_eq!(*m == 1, p.source == TokenSource::Sampled);
        if *m == 1 {
            assert_eq!(p.weight_version, Some(7));
        } else {
            assert_eq!(*lp, 0.0);
        }
    }
    cache
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Qwen2.5 is append-only: at every step the incremental stream equals the full render.
    #[test]
    fn qwen25_incremental_equals_full_render(msgs in conversation_with(false, true)) {
        let codec = qwen25();
        let cache = roll_out(codec, &msgs, true);
        prop_assert!(cache.append_only());
        let replay = codec.replay(&input(&msgs, true)).unwrap();
        prop_assert!(replay.append_only);
        prop_assert_eq!(&replay.ids, &codec.render_ids(&input(&msgs, true)).unwrap());
        // The replay's stream is the same as the rollout's (the last messages are observations).
        prop_assert_eq!(&replay.ids, &cache.tokens().unwrap().all_ids());
        let spans: Vec<u32> = msgs.iter().enumerate().filter(|(_, m)| m["role"] == "assistant")
            .flat_map(|(i, _)| sampled_span(codec, &msgs, i)).collect();
        prop_assert_eq!(masked(&replay.ids, &replay.mask), spans);
    }

    /// Any content, Qwen2.5: the flag is honest and sampled tokens are kept.
    #[test]
    fn qwen25_append_only_is_honest(msgs in conversation(false)) {
        let codec = qwen25();
        let cache = roll_out(codec, &msgs, true);
        let replay = codec.replay(&input(&msgs, true)).unwrap();
        let full = codec.render_ids(&input(&msgs, true)).unwrap();
        if replay.append_only { prop_assert_eq!(&replay.ids, &full); }
        if cache.append_only() { prop_assert_eq!(&cache.tokens().unwrap().all_ids(), &full); }
        prop_assert_eq!(&replay.ids, &cache.tokens().unwrap().all_ids());
    }

    /// Qwen3 with reasoning: whenever the cache says append-only the stream equals the full
    /// render; either way the sampled tokens are exactly the sampled spans, in order.
    #[test]
    fn qwen3_sampled_tokens_survive_and_append_only_is_honest(msgs in conversation(true)) {
        let codec = qwen3();
        let cache = roll_out(codec, &msgs, true);
        let replay = codec.replay(&input(&msgs, true)).unwrap();
        let full = codec.render_ids(&input(&msgs, true)).unwrap();
        if replay.append_only { prop_assert_eq!(&replay.ids, &full); }
        if cache.append_only() { prop_assert_eq!(&cache.tokens().unwrap().all_ids(), &full); }
        let spans: Vec<u32> = msgs.iter().enumerate().filter(|(_, m)| m["role"] == "assistant")
            .flat_map(|(i, _)| sampled_span(codec, &msgs, i)).collect();
        prop_assert_eq!(masked(&replay.ids, &replay.mask), spans);
    }

    /// Length limits: an operation either fits or fails with a typed error and leaves the cache
    /// unchanged; the invariants hold after any sequence.
    #[test]
    fn limits_are_enforced_before_anything_is_cut(msgs in conversation(false), max_model in 20usize..400, max_resp in 1usize..200) {
        let codec = qwen25();
        let typed: Vec<Message> = msgs.iter().map(|m| serde_json::from_value(m.clone()).unwrap()).collect();
        let first = msgs.iter().position(|m| m["role"] == "assistant").unwrap();
        let limits = LengthLimits { max_prompt_len: None, max_response_len: Some(max_resp), max_model_len: Some(max_model) };
        let mut cache = match codec.start("p", typed[..first].to_vec(), typed_tools(), Default::default(), limits) {
            Ok(c) => c,
            Err(Error::LengthLimit { needed, allowed, .. }) => { prop_assert!(needed > allowed); return Ok(()); }
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        let mut i = first;
        while i < msgs.len() {
            let before = cache.clone();
            let res = if msgs[i]["role"] == "assistant" {
                let span = sampled_span(codec, &msgs, i);
                i += 1;
                codec.append_sampled(&mut cache, &span, &vec![-0.5; span.len()], None).map(|_| ())
            } else {
                let end = msgs[i..].iter().position(|m| m["role"] == "assistant").map_or(msgs.len(), |k| i + k);
                let r = codec.append_messages(&mut cache, &typed[i..end]);
                i = end;
                r
            };
            cache.check_invariants().unwrap();
            if let Err(e) = res {
                prop_assert!(matches!(e, Error::LengthLimit { .. }), "{e}");
                prop_assert_eq!(&cache, &before);
                break;
            }
        }
        let t = cache.tokens().unwrap();
        prop_assert!(t.len() <= max_model && t.response_ids.len() <= max_resp);
    }
}

#[test]
fn qwen3_new_query_after_reasoning_is_reported_and_sampled_tokens_are_kept() {
    let codec = qwen3();
    let msgs = vec![
        json!({"role": "user", "content": "What is 2+2?"}),
        json!({"role": "assistant", "content": "4", "reasoning_content": "Adding."}),
        json!({"role": "user", "content": "And 3+3?"}),
    ];
    let cache = roll_out(codec, &msgs, true);
    assert!(
        !cache.append_only(),
        "Qwen3 drops the reasoning of turns before a new query"
    );
    let t = cache.tokens().unwrap();
    let kept = codec
        .decode(&masked(&t.response_ids, &t.response_mask), false)
        .unwrap();
    assert_eq!(kept, "<think>\nAdding.\n</think>\n\n4<|im_end|>");
    // The stream ends with the new query and the generation prompt, rendered exactly.
    assert!(codec
        .decode(&t.all_ids(), false)
        .unwrap()
        .ends_with("<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"));
    let replay = codec.replay(&input(&msgs, true)).unwrap();
    assert!(!replay.append_only);
    assert_eq!(replay.ids, t.all_ids());
    // With tool results instead of a new query the reasoning stays: append-only.
    let msgs = vec![
        json!({"role": "user", "content": "List files."}),
        json!({"role": "assistant", "content": "", "reasoning_content": "Use bash.",
               "tool_calls": [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]}),
        json!({"role": "tool", "tool_call_id": "c", "content": "a.txt"}),
    ];
    assert!(roll_out(codec, &msgs, true).append_only());
}

#[test]
fn sampled_turns_are_decoded_and_parsed() {
    let codec = qwen3();
    let mut cache = codec
        .start(
            "t",
            vec![Message::user("hi")],
            typed_tools(),
            Default::default(),
            LengthLimits::default(),
        )
        .unwrap();
    let text = "<think>\nplan\n</think>\n\nRunning.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>";
    let ids = codec.encode(text).unwrap();
    let turn = codec
        .append_sampled(&mut cache, &ids, &vec![-0.1; ids.len()], Some(1))
        .unwrap();
    assert_eq!(turn.text, text);
    assert_eq!(turn.message.reasoning_content.as_deref(), Some("plan"));
    assert_eq!(turn.message.text(), "Running.");
    assert_eq!(
        turn.message.tool_calls[0].function.arguments,
        json!({"command": "ls"})
    );
    assert!(turn.tool_call_error.is_none());
    // A malformed call is data.
    codec
        .append_messages(&mut cache, &[Message::tool("call_0", "a.txt")])
        .unwrap();
    let ids = codec
        .encode("<tool_call>{\"name\": \"rm\"}</tool_call><|im_end|>")
        .unwrap();
    let turn = codec
        .append_sampled(&mut cache, &ids, &vec![-0.1; ids.len()], Some(1))
        .unwrap();
    assert!(turn
        .tool_call_error
        .unwrap()
        .message()
        .contains("'rm' is not defined"));
    assert_eq!(cache.assistant_turns(), 2);
}

#[test]
fn misuse_is_a_typed_error() {
    let codec = qwen25();
    let mut cache = codec
        .start(
            "t",
            vec![Message::user("hi")],
            vec![],
            Default::default(),
            LengthLimits::default(),
        )
        .unwrap();
    // Observations need a preceding assistant turn.
    assert!(codec
        .append_messages(&mut cache, &[Message::user("again")])
        .is_err());
    // Logprobs must match the ids.
    assert!(codec
        .append_sampled(&mut cache, &[1, 2], &[-0.1], None)
        .is_err());
    // A truncated turn (no eos) is closed by template glue, not by rewriting sampled tokens.
    let ids = codec.encode("partial answ").unwrap();
    codec
        .append_sampled(&mut cache, &ids, &vec![-0.2; ids.len()], None)
        .unwrap();
    codec
        .append_messages(&mut cache, &[Message::user("go on")])
        .unwrap();
    let t = cache.tokens().unwrap();
    assert_eq!(t.response_ids[ids.len()], codec.eos_token_id());
    assert_eq!(t.response_mask[ids.len()], 0);
    assert_eq!(t.provenance[ids.len()].source, TokenSource::TemplateGlue);
    let full = codec
        .render_ids(&ChatInput {
            messages: messages_to_json(&[
                Message::user("hi"),
                Message::assistant("partial answ"),
                Message::user("go on"),
            ])
            .unwrap(),
            add_generation_prompt: true,
            ..ChatInput::default()
        })
        .unwrap();
    assert_eq!(t.all_ids(), full);
}

/// One rollout of `interleaved_rollouts_match_isolated_ones`: its system prompt, tools, template
/// variables and the tool it calls each turn.
struct Setup {
    system: Option<&'static str>,
    tools: Vec<ToolSpec>,
    kwargs: serde_json::Map<String, Value>,
    thinking: bool,
}

fn setups() -> Vec<Setup> {
    let no_thinking = json!({"enable_thinking": false});
    let with = |tools: Vec<ToolSpec>| Setup {
        system: Some("You are an agent."),
        tools,
        kwargs: Default::default(),
        thinking: true,
    };
    vec![
        with(typed_tools()),
        // The same system message and tools, other template variables (another generation
        // prompt).
        Setup {
            kwargs: no_thinking.as_object().cloned().unwrap(),
            thinking: false,
            ..with(typed_tools())
        },
        // The same system message, a shorter tool list, then none.
        with(typed_tools()[..1].to_vec()),
        with(vec![]),
        // No system message.
        Setup {
            system: None,
            ..with(typed_tools())
        },
    ]
}

fn turn_text(rollout: usize, step: usize, thinking: bool) -> String {
    // Step 0 is the same turn in every rollout (equal sampled ids across caches); later turns
    // differ between rollouts with the same number of tokens.
    let file = if step == 0 {
        "f".to_owned()
    } else {
        format!("f{rollout}{step}")
    };
    let call = format!(
        "<tool_call>\n{{\"name\": \"bash\", \"arguments\": {{\"command\": \"cat {file}\"}}}}\n</tool_call><|im_end|>"
    );
    if thinking {
        format!("<think>\nread {file}\n</think>\n\n{call}")
    } else {
        call
    }
}

fn sample(codec: &Codec, cache: &mut RolloutCache, setup: &Setup, rollout: usize, step: usize) {
    let ids = codec
        .encode(&turn_text(rollout, step, setup.thinking))
        .unwrap();
    codec
        .append_sampled(cache, &ids, &vec![-0.25; ids.len()], Some(1))
        .unwrap();
}

fn observe(codec: &Codec, cache: &mut RolloutCache, step: usize) {
    let obs = Message::tool("call_0", format!("contents of file {step}\n"));
    codec.append_messages(cache, &[obs]).unwrap();
}

fn start_rollout(codec: &Codec, setup: &Setup) -> RolloutCache {
    let mut messages: Vec<Message> = setup.system.map(Message::system).into_iter().collect();
    messages.push(Message::user("Read the files."));
    codec
        .start(
            "s",
            messages,
            setup.tools.clone(),
            setup.kwargs.clone(),
            LengthLimits::default(),
        )
        .unwrap()
}

/// What the codec keeps between appends (the window's prompt render, the last decoded turn)
/// is keyed by what it depends on: rollouts with other system prompts, tools or template
/// variables, advanced in turn on one codec, get the tokens each gets alone on a fresh codec,
/// and the full render wherever the stream is append-only.
#[test]
fn interleaved_rollouts_match_isolated_ones() {
    let shared = Codec::from_dir(tokenizer_dir("qwen3"))
        .unwrap()
        .with_tool_parser(ToolCallFormat::Hermes);
    // Appends render the small window, whose prompt render the codec keeps.
    assert!(shared.window_exact());
    let setups = setups();
    let mut caches: Vec<RolloutCache> = setups.iter().map(|s| start_rollout(&shared, s)).collect();
    for step in 0..3 {
        // All turns are sampled before any observation is appended: each append follows
        // another rollout's operations.
        for (r, (cache, setup)) in caches.iter_mut().zip(&setups).enumerate() {
            sample(&shared, cache, setup, r, step);
        }
        for (cache, setup) in caches.iter_mut().zip(&setups) {
            observe(&shared, cache, step);
            if cache.append_only() {
                assert_eq!(
                    shared.full_render_ids(cache).unwrap(),
                    cache.tokens().unwrap().all_ids(),
                    "step {step} of {:?} {:?}",
                    setup.system,
                    setup.kwargs
                );
            }
        }
    }
    // The thinking rollouts with tool observations are append-only: the full-render check ran.
    assert!([0, 2, 3, 4].iter().all(|i| caches[*i].append_only()));
    for (r, (cache, setup)) in caches.iter().zip(&setups).enumerate() {
        let alone = Codec::from_dir(tokenizer_dir("qwen3"))
            .unwrap()
            .with_tool_parser(ToolCallFormat::Hermes);
        let mut own = start_rollout(&alone, setup);
        for step in 0..3 {
            sample(&alone, &mut own, setup, r, step);
            observe(&alone, &mut own, step);
        }
        assert_eq!(
            own.tokens(),
            cache.tokens(),
            "{:?} {:?}",
            setup.system,
            setup.kwargs
        );
        assert_eq!(own.append_only(), cache.append_only());
    }
}
