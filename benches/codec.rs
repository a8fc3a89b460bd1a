#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Codec benchmarks.
//!
//! - `append_observation/{10,100,500}`: appending one tool observation after an assistant turn
//!   in a conversation of N turns. The codec renders only a small window, so the cost must stay
//!   flat as the conversation grows (only the append is timed: cloning the N-turn cache and
//!   the assistant turns between appends are set-up).
//! - `append_observation/tokenize_delta_only`: the baseline in the same run, tokenizing the
//!   text one append adds (template glue, the observation, the generation prompt) alone; the
//!   rest of an append is the window render. `tokenize_delta_only/tokenizers` tokenizes the
//!   same text through the `tokenizers` pipeline, which the codec's native encoder replaces.
//! - `render_tokenize`: full render + tokenization of the Qwen3 golden conversations plus a
//!   20-turn agent conversation, against Python `transformers`' `apply_chat_template(
//!   tokenize=True)` on the same conversations in the same run (needs `.venv-codec`, found
//!   through `UNIAGENT_CODEC_VENV`; skipped with a message when unset). The ratio is printed.

use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use serde_json::{json, Value};
use uniagent_core::codec::{ChatInput, Codec};
use uniagent_core::{LengthLimits, Message, RolloutCache, ToolSpec};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/uniagent-core/tests/fixtures/tokenizers/qwen3")
}

fn codec() -> Codec {
    Codec::from_dir(fixture_dir()).unwrap_or_else(|e| panic!("loading the Qwen3 fixture: {e}"))
}

fn bash_tool() -> ToolSpec {
    ToolSpec::function(
        "bash",
        "Run a command.",
        json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    )
}

fn observation(turn: usize) -> Message {
    Message::tool(
        "call_0",
        format!("total 12\n-rw-r--r-- 1 root root 42 file_{turn}.py\nexit code: 0"),
    )
}

/// A rollout of `turns` assistant turns, each a tool call followed by its observation, ending
/// with a sampled assistant turn.
fn rollout(codec: &Codec, turns: usize) -> RolloutCache {
    let messages = vec![
        Message::system("You are a coding agent."),
        Message::user("Fix the failing test."),
    ];
    let mut cache = codec
        .start(
            "bench",
            messages,
            vec![bash_tool()],
            Default::default(),
            LengthLimits::default(),
        )
        .unwrap_or_else(|e| panic!("start: {e}"));
    for turn in 0..turns {
        let text = format!(
            "<think>\nLook at file {turn}.\n</think>\n\n<tool_call>\n{{\"name\": \"bash\", \"arguments\": {{\"command\": \"cat file_{turn}.py\"}}}}\n</tool_call><|im_end|>"
        );
        let ids = codec
            .encode(&text)
            .unwrap_or_else(|e| panic!("encode: {e}"));
        codec
            .append_sampled(&mut cache, &ids, &vec![-0.5; ids.len()], Some(0))
            .unwrap_or_else(|e| panic!("{e}"));
        if turn + 1 < turns {
            codec
                .append_messages(&mut cache, &[observation(turn)])
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    cache
}

fn append_observation(c: &mut Criterion) {
    let codec = codec();
    let mut group = c.benchmark_group("append_observation");
    // The assistant turn appended (untimed) between two observations.
    let turn_text = "<think>\nNext.\n</think>\n\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>";
    let turn_ids = codec
        .encode(turn_text)
        .unwrap_or_else(|e| panic!("encode: {e}"));
    let turn_logprobs = vec![-0.5; turn_ids.len()];
    for turns in [10usize, 100, 500] {
        let cache = rollout(&codec, turns);
        let obs = [observation(turns)];
        group.bench_with_input(BenchmarkId::from_parameter(turns), &turns, |b, _| {
            // Only the observation append is timed. A fresh clone every `CHUNK` appends keeps
            // the conversation at ~`turns` turns; cloning (which evicts the CPU caches) and the
            // assistant turns in between are set-up.
            const CHUNK: u64 = 16;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    let mut live = cache.clone();
                    live.reserve(CHUNK as usize * 256, CHUNK as usize * 2);
                    for _ in 0..CHUNK.min(iters - done) {
                        let start = Instant::now();
                        codec
                            .append_messages(&mut live, black_box(&obs))
                            .unwrap_or_else(|e| panic!("{e}"));
                        total += start.elapsed();
                        codec
                            .append_sampled(&mut live, &turn_ids, &turn_logprobs, Some(0))
                            .unwrap_or_else(|e| panic!("{e}"));
                        done += 1;
                    }
                }
                total
            })
        });
    }
    // Baseline in the same run: tokenizing the appended text alone (glue, observation and
    // generation prompt), the part of an append no caching can skip.
    let mut live = rollout(&codec, 10);
    let before = live.tokens().map_or(0, |t| t.all_ids().len());
    codec
        .append_messages(&mut live, &[observation(10)])
        .unwrap_or_else(|e| panic!("{e}"));
    let appended = live.tokens().map(|t| t.all_ids()[before..].to_vec());
    let delta = codec
        .decode(&appended.unwrap_or_default(), false)
        .unwrap_or_else(|e| panic!("{e}"));
    group.bench_function("tokenize_delta_only", |b| {
        b.iter(|| {
            codec
                .encode(black_box(&delta))
                .unwrap_or_else(|e| panic!("{e}"))
        })
    });
    group.bench_function("tokenize_delta_only/tokenizers", |b| {
        b.iter(|| {
            codec
                .tokenizer()
                .encode(black_box(delta.as_str()), false)
                .unwrap_or_else(|e| panic!("{e}"))
        })
    });
    group.finish();
}

fn conversations() -> Vec<Value> {
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("templates_golden.json"))
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut convs: Vec<Value> = golden["cases"]
        .as_array()
        .map(|cases| {
            cases
                .iter()
                .map(|c| json!({"messages": c["messages"], "tools": c["tools"], "add_generation_prompt": c["add_generation_prompt"], "template_kwargs": c["template_kwargs"]}))
                .collect()
        })
        .unwrap_or_default();
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the failing test."}),
    ];
    for turn in 0..20 {
        messages.push(json!({"role": "assistant", "content": "", "reasoning_content": format!("Look at file {turn}."),
            "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": {"command": format!("cat file_{turn}.py")}}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": format!("total 12\nfile_{turn}.py\nexit code: 0")}));
    }
    convs.push(json!({"messages": messages, "tools": [serde_json::to_value(bash_tool()).unwrap_or_default()], "add_generation_prompt": true, "template_kwargs": {}}));
    convs
}

fn to_input(conv: &Value) -> ChatInput {
    ChatInput {
        messages: conv["messages"].as_array().cloned().unwrap_or_default(),
        tools: conv["tools"].as_array().cloned().unwrap_or_default(),
        add_generation_prompt: conv["add_generation_prompt"].as_bool().unwrap_or(false),
        template_kwargs: conv["template_kwargs"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
    }
}

/// Python's seconds per `apply_chat_template(tokenize=True)` call, or why it was not measured.
fn python_seconds(convs: &[Value]) -> Result<f64, String> {
    let venv = std::env::var("UNIAGENT_CODEC_VENV")
        .map_err(|_| "UNIAGENT_CODEC_VENV is unset".to_owned())?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/uniagent-core/tests/fixtures/hf_apply_chat_template.py");
    let mut child = Command::new(PathBuf::from(venv).join("bin/python"))
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting python: {e}"))?;
    let req = json!({"model_dir": fixture_dir(), "mode": "bench", "iterations": 50, "conversations": convs});
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(req.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let v: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("python output: {e}"))?;
    v["seconds_per_conversation"]
        .as_f64()
        .ok_or_else(|| "no timing from python".to_owned())
}

fn render_tokenize(c: &mut Criterion) {
    let codec = codec();
    let convs = conversations();
    let inputs: Vec<ChatInput> = convs.iter().map(to_input).collect();
    let run = |inputs: &[ChatInput]| {
        for input in inputs {
            black_box(codec.render_ids(input).unwrap_or_else(|e| panic!("{e}")));
        }
    };
    c.bench_function("render_tokenize/rust_all_conversations", |b| {
        b.iter(|| run(&inputs))
    });
    // Baseline in the same run: the same conversations through transformers.
    let iterations = 50;
    let start = Instant::now();
    for _ in 0..iterations {
        run(&inputs);
    }
    let rust = start.elapsed().as_secs_f64() / (iterations * inputs.len()) as f64;
    match python_seconds(&convs) {
        Ok(python) => println!(
            "render_tokenize: rust {:.1} us/conversation, transformers {:.1} us/conversation, speed-up x{:.1}",
            rust * 1e6,
            python * 1e6,
            python / rust
        ),
        Err(why) => println!("render_tokenize: rust {:.1} us/conversation; python baseline skipped: {why}", rust * 1e6),
    }
}

criterion_group!(benches, append_observation, render_tokenize);
criterion_main!(benches);
