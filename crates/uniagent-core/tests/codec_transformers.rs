//! Live cross-check against Hugging Face `transformers`' `apply_chat_template` on seeded random
//! conversations (floats, unicode, `<>&'`, string arguments, reasoning, thinking switches and
//! inputs on which the template raises).
//!
//! Needs the `.venv-codec` of `scripts/setup/10-codec.sh`, found through `UNIAGENT_CODEC_VENV`
//! (exported by `scripts/env/codec.sh`). When the variable is set and the venv is missing the
//! test fails; when it is unset (outside `scripts/test`) the test is skipped with a message.
#![cfg(feature = "codec")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns unwrap too

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use uniagent_core::codec::{ChatInput, Codec};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> Option<PathBuf> {
    let Ok(venv) = std::env::var("UNIAGENT_CODEC_VENV") else {
        eprintln!("skipped: UNIAGENT_CODEC_VENV is unset (run scripts/setup/10-codec.sh and source scripts/env/codec.sh)");
        return None;
    };
    let py = PathBuf::from(&venv).join("bin/python");
    assert!(
        py.exists(),
        "UNIAGENT_CODEC_VENV={venv} but {} is missing: run scripts/setup/10-codec.sh",
        py.display()
    );
    Some(py)
}

fn pick<'a, T>(rng: &mut fastrand::Rng, items: &'a [T]) -> &'a T {
    &items[rng.usize(..items.len())]
}

fn text(rng: &mut fastrand::Rng) -> String {
    const PARTS: [&str; 16] = [
        "Hello",
        " ",
        "\n",
        "é",
        "中文",
        "😀",
        "<b>&amp;</b>",
        "'quote'",
        "\"dq\"",
        "\\",
        "\t",
        "  x",
        "1e-05",
        "",
        "ok.",
        "\n\n",
    ];
    (0..rng.usize(0..8)).map(|_| *pick(rng, &PARTS)).collect()
}

fn arguments(rng: &mut fastrand::Rng) -> Value {
    let floats = [1e-5, 10.0, 0.1, 1e16, 2.5e-7, 123456.789, -0.0];
    let mut args = json!({"command": text(rng), "n": rng.i64(-5..5), "x": *pick(rng, &floats),
                          "flag": rng.bool(), "list": [1, 2.0, null, "s"], "nested": {"k": text(rng)}});
    if rng.bool() {
        args = Value::String(args.to_string()); // some callers pass arguments as a JSON string
    }
    args
}

fn conversation(rng: &mut fastrand::Rng, family: &str) -> Value {
    let mut messages = Vec::new();
    if rng.bool() {
        messages.push(json!({"role": "system", "content": text(rng)}));
    }
    messages.push(json!({"role": "user", "content": text(rng)}));
    for _ in 0..rng.usize(0..4) {
        let calls: Vec<Value> = (0..rng.usize(0..3))
            .map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "bash", "arguments": arguments(rng)}}))
            .collect();
        let content = if calls.is_empty() || rng.bool() {
            json!(text(rng))
        } else {
            Value::Null
        };
        let mut m = json!({"role": "assistant", "content": content});
        if family == "qwen3" && rng.bool() {
            m["reasoning_content"] = json!(text(rng));
        }
        if !calls.is_empty() {
            m["tool_calls"] = json!(calls);
        }
        messages.push(m);
        for (i, _) in calls.iter().enumerate() {
            messages.push(
                json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": text(rng)}),
            );
        }
        if calls.is_empty() || rng.u8(..4) == 0 {
            messages.push(json!({"role": "user", "content": text(rng)}));
        }
    }
    if rng.u8(..10) == 0 {
        messages.clear(); // the template raises on an empty conversation
    }
    let tools = if rng.bool() {
        json!([{"type": "function", "function": {"name": "bash", "description": "Run <cmd> & 'quote'",
            "parameters": {"type": "object", "properties": {"command": {"type": "string", "default": 1e-05}}}}}])
    } else {
        json!([])
    };
    let kwargs = match rng.u8(..3) {
        0 => json!({}),
        1 => json!({"enable_thinking": false}),
        _ => json!({"enable_thinking": true}),
    };
    json!({"messages": messages, "tools": tools, "add_generation_prompt": rng.bool(), "template_kwargs": kwargs})
}

fn reference(py: &PathBuf, dir: &PathBuf, convs: &[Value]) -> Vec<Value> {
    let script = manifest().join("tests/fixtures/hf_apply_chat_template.py");
    let mut child = Command::new(py)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let req = json!({"model_dir": dir, "mode": "render", "conversations": convs});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "reference script failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn random_conversations_render_like_transformers() {
    let Some(py) = python() else { return };
    for family in ["qwen2.5", "qwen3"] {
        let dir = manifest().join("tests/fixtures/tokenizers").join(family);
        let codec = Codec::from_dir(&dir).unwrap();
        let mut rng = fastrand::Rng::with_seed(20_251_129);
        let convs: Vec<Value> = (0..60).map(|_| conversation(&mut rng, family)).collect();
        let want = reference(&py, &dir, &convs);
        let mut errors = 0;
        for (conv, want) in convs.iter().zip(&want) {
            let input = ChatInput {
                messages: conv["messages"].as_array().unwrap().clone(),
                tools: conv["tools"].as_array().unwrap().clone(),
                add_generation_prompt: conv["add_generation_prompt"].as_bool().unwrap(),
                template_kwargs: conv["template_kwargs"].as_object().unwrap().clone(),
            };
            match (codec.render(&input), want.get("error")) {
                (Ok(text), None) => {
                    assert_eq!(text, want["text"].as_str().unwrap(), "{family}: {conv}");
                    let ids: Vec<Value> = codec
                        .encode(&text)
                        .unwrap()
                        .into_iter()
                        .map(Value::from)
                        .collect();
                    assert_eq!(&Value::Array(ids), &want["ids"], "{family}: {conv}");
                }
                (Err(_), Some(_)) => errors += 1,
                (ours, theirs) => {
                    panic!("{family}: ours {ours:?}, transformers {theirs:?} on {conv}")
                }
            }
        }
        assert!(
            errors > 0 && errors < 30,
            "{family}: {errors} conversations raised"
        );
    }
}
