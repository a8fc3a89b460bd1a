//! Token fidelity through the gateway as real harnesses drive it: the official `openai` and
//! `anthropic` SDKs (`tests/clients/fidelity.py`) talk to the gateway serving the tiny
//! random-weight Qwen2 model at temperature 1, so answers are arbitrary tokens (turns cut by
//! `max_tokens`, leading and trailing whitespace, characters split across tokens, special
//! tokens as text), streamed or not, and echo every answer exactly as returned; two sessions
//! rewrite an earlier assistant turn, and two stream one 1,500-token answer (which samples
//! tokens holding part of a character: the stream must keep its bytes together). Every recorded chain is checked against Hugging Face
//! `transformers`' `apply_chat_template`:
//! - each chain's text is the template's render of the conversation the client holds (its
//!   messages, the answers as returned), except for sampled end-of-turn ids other than the
//!   template's own, which the chain keeps as sampled;
//! - each sampled run decodes to exactly the text the SDK returned (not trimmed);
//! - a conversation that only appends is one chain; after a rewrite, a chain ends with the
//!   answer to the rewritten conversation.
//!
//! Needs `UNIAGENT_GATEWAY_VENV` (the SDKs) and `UNIAGENT_CODEC_VENV` (transformers); skips
//! with a printed reason when either is unset, fails when one is set and missing.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::sdk::{client_script, ids, sampled_runs, tiny_model_dir, venv_python};
use serde_json::{json, Value};
use uniagent_core::codec::{messages_to_json, Codec};
use uniagent_core::Message;
use uniagent_gateway::{load_model_dir, Gateway, GatewayConfig};

/// transformers' renders (`add_generation_prompt: false`) of `conversations`.
fn hf_render(python: &Path, model_dir: &Path, conversations: &[Value]) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../uniagent-core/tests/fixtures/hf_apply_chat_template.py");
    let request = json!({
        "model_dir": model_dir,
        "mode": "render",
        "conversations": conversations
            .iter()
            .map(|m| json!({"messages": m, "add_generation_prompt": false}))
            .collect::<Vec<_>>(),
    });
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let renders: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    renders
        .into_iter()
        .map(|r| {
            r["text"]
                .as_str()
                .unwrap_or_else(|| panic!("transformers refused: {r}"))
                .to_owned()
        })
        .collect()
}

/// A chain's text as the template writes it: sampled end-of-turn ids other than the template's
/// own are left out (kept in the chain as sampled), and a last turn cut by `max_tokens` gets
/// the closing the template adds.
fn chain_as_template(codec: &Codec, t: &Value) -> String {
    let eos = codec.eos_token_id();
    let mut all = ids(t, "prompt_ids");
    for (id, m) in ids(t, "response_ids")
        .into_iter()
        .zip(ids(t, "response_mask"))
    {
        if m == 1 && id != eos && codec.stop_token_ids().contains(&id) {
            continue;
        }
        all.push(id);
    }
    let mut text = codec.decode(&all, false).unwrap();
    if all.last() != Some(&eos) {
        text.push_str(codec.eos_token());
    }
    text.push('\n');
    text
}

/// The texts of a trajectory's sampled runs, without their end-of-turn id.
fn run_texts(codec: &Codec, t: &Value) -> Vec<String> {
    sampled_runs(t)
        .into_iter()
        .map(|mut run| {
            if run
                .last()
                .is_some_and(|id| codec.stop_token_ids().contains(id))
            {
                run.pop();
            }
            codec.decode(&run, false).unwrap()
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_conversations_record_the_chains_transformers_renders() {
    let Some(sdk_python) = venv_python(
        "UNIAGENT_GATEWAY_VENV",
        "scripts/setup/60-gateway-clients.sh",
    ) else {
        return;
    };
    let Some(hf_python) = venv_python("UNIAGENT_CODEC_VENV", "scripts/setup/10-codec.sh") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    tiny_model_dir(dir.path());
    let (codec, engine) = load_model_dir(dir.path()).unwrap();
    let gateway = Arc::new(Gateway::new(codec, engine, GatewayConfig::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server =
        tokio::spawn(async move { axum::serve(listener, uniagent_gateway::router(gateway)).await });
    let script = client_script("fidelity.py");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(600),
        tokio::task::spawn_blocking(move || {
            Command::new(sdk_python)
                .arg(script)
                .arg(base)
                .output()
                .unwrap()
        }),
    )
    .await
    .expect("fidelity.py did not finish within 10 minutes")
    .unwrap();
    server.abort();
    assert!(
        out.status.success(),
        "fidelity.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let codec = Codec::from_dir(dir.path()).unwrap();

    // Every chain against transformers' render of its messages, and every conversation as the
    // client holds it against the chain that ends with its last answer.
    let mut conversations = Vec::new();
    let mut chains = Vec::new();
    for (name, session) in report.as_object().unwrap() {
        for t in session["trajectories"].as_array().unwrap() {
            let messages: Vec<Message> = serde_json::from_value(t["messages"].clone()).unwrap();
            conversations.push(Value::Array(messages_to_json(&messages).unwrap()));
            chains.push((
                format!("{name} chain {}", chains.len()),
                chain_as_template(&codec, t),
            ));
        }
        let last = session["trajectories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| {
                run_texts(&codec, t).last() == strings(&session["texts"]).last()
                    && t["messages"].as_array().unwrap().len()
                        == session["conversation"].as_array().unwrap().len()
            })
            .unwrap_or_else(|| panic!("{name}: no chain ends with the last answer"));
        conversations.push(session["conversation"].clone());
        chains.push((
            format!("{name} as the client holds it"),
            chain_as_template(&codec, last),
        ));
    }
    let renders = hf_render(&hf_python, dir.path(), &conversations);
    let mut cut = 0;
    for ((what, chain), render) in chains.iter().zip(&renders) {
        assert_eq!(
            chain, render,
            "{what}: the chain is not the template's render"
        );
    }
    for (name, session) in report.as_object().unwrap() {
        let texts = strings(&session["texts"]);
        let trajectories = session["trajectories"].as_array().unwrap();
        cut += trajectories
            .iter()
            .filter(|t| {
                !ids(t, "response_ids")
                    .last()
                    .is_some_and(|id| codec.stop_token_ids().contains(id))
            })
            .count();
        if name.ends_with("rewrite") {
            // The first chain holds the answers before the rewrite, as returned.
            assert_eq!(
                run_texts(&codec, &trajectories[0])[..3],
                texts[..3],
                "{name}"
            );
        } else {
            assert_eq!(
                trajectories.len(),
                1,
                "{name}: an appending conversation is one chain"
            );
            assert_eq!(run_texts(&codec, &trajectories[0]), texts, "{name}");
        }
    }
    // The workload did exercise what it is for: turns cut by max_tokens, and (in the seeded
    // long OpenAI stream) sampled tokens that hold part of a character.
    assert!(cut > 0, "no chain ended on a turn cut by max_tokens");
    let split = report["oa-long"]["trajectories"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(sampled_runs)
        .flatten()
        .filter(|id| codec.decode(&[*id], false).unwrap().contains('\u{FFFD}'))
        .count();
    assert!(split > 0, "no sampled token split a character");
    let all: String = report
        .as_object()
        .unwrap()
        .values()
        .flat_map(|s| strings(&s["texts"]))
        .collect();
    assert!(
        all.chars().any(|c| c.is_whitespace()),
        "no answer held whitespace"
    );
}
