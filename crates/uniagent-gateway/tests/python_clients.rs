//! The official `openai` and `anthropic` Python SDKs (pinned, `.venv-gateway`, see
//! `scripts/setup/60-gateway-clients.sh`) against the gateway serving the tiny Qwen2 model on
//! CPU through the tch engine: multi-turn, streaming and not, tool declarations, harness-made
//! tool calls, an edited history. The tokens each session recorded are then checked: one chain
//! per conversation, its mask-1 runs are exactly the answers the SDKs received (the edited one
//! rolled back), and its text is the chat template's full render of the conversation. Every
//! session is recorded as a cassette and replays identically.
//!
//! Skips with a printed reason when `UNIAGENT_GATEWAY_VENV` is unset; fails when it is set and
//! the venv is missing.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::sdk::{client_script, ids, sampled_runs, tiny_model_dir, venv_python};
use serde_json::Value;
use uniagent_core::codec::{messages_to_json, ChatInput, Codec};
use uniagent_core::Message;
use uniagent_gateway::cassette::{replay, GatewayCassette, CASSETTES};
use uniagent_gateway::{load_model_dir, Gateway, GatewayConfig, Recorder};

/// The texts of the mask-1 runs (the sampled turns), without their end-of-turn id.
fn sampled_turns(codec: &Codec, t: &Value) -> Vec<String> {
    sampled_runs(t)
        .into_iter()
        .map(|mut turn| {
            if turn
                .last()
                .is_some_and(|id| codec.stop_token_ids().contains(id))
            {
                turn.pop();
            }
            // The tool-call parser returns the text around calls trimmed.
            codec.decode(&turn, false).unwrap().trim().to_owned()
        })
        .collect()
}

fn texts(v: &Value) -> Vec<String> {
    v["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap_or("").trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_drive_the_gateway_and_the_tokens_are_exact() {
    let Some(python) = venv_python(
        "UNIAGENT_GATEWAY_VENV",
        "scripts/setup/60-gateway-clients.sh",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    tiny_model_dir(dir.path());
    let (codec, engine) = load_model_dir(dir.path()).unwrap();
    let cassettes = tempfile::tempdir().unwrap();
    let gateway = Arc::new(
        Gateway::new(codec, engine, GatewayConfig::default()).with_cassettes(
            Recorder::open(cassettes.path(), CASSETTES).unwrap(),
            Value::Null,
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = uniagent_gateway::router(gateway);
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let script = client_script("drive.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .arg(base)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    server.abort();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "drive.py failed:\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let codec = Codec::from_dir(dir.path()).unwrap();

    // OpenAI: one chain; the third answer was edited by the harness, so rolled back.
    let oa = &report["oa"];
    let t = oa["trajectories"].as_array().unwrap();
    assert_eq!(t.len(), 1, "{oa}");
    let texts_oa = texts(oa);
    assert_eq!(
        sampled_turns(&codec, &t[0]),
        vec![
            texts_oa[0].clone(),
            texts_oa[1].clone(),
            texts_oa[3].clone()
        ]
    );
    assert_eq!(t[0]["extra_fields"]["gateway"]["rollbacks"], 1);
    assert_eq!(t[0]["reward_score"], 1.0);
    assert!(t[0]["response_logprobs"].is_array());
    let response = codec.decode(&ids(&t[0], "response_ids"), false).unwrap();
    assert!(
        response.contains("edited answer") && response.contains("a.txt"),
        "{response}"
    );
    // The prompt is the template's render of the first request, tools included.
    let first_request: Vec<Message> = serde_json::from_value(t[0]["messages"].clone()).unwrap();
    let tools = serde_json::json!([{"type": "function", "function": {"name": "ls",
        "description": "List files.", "parameters": {"type": "object",
        "properties": {"path": {"type": "string"}}}}}]);
    let render = codec
        .render_ids(&ChatInput {
            messages: messages_to_json(&first_request[..2]).unwrap(),
            tools: tools.as_array().unwrap().clone(),
            add_generation_prompt: true,
            ..ChatInput::default()
        })
        .unwrap();
    assert_eq!(ids(&t[0], "prompt_ids"), render);

    // Streaming gave the same greedy first turn.
    let os = &report["os"]["trajectories"][0];
    assert_eq!(sampled_turns(&codec, os), vec![texts_oa[0].clone()]);

    // Anthropic: one chain, every answer a mask-1 run, and the whole chain's text is the
    // template's full render of the final conversation.
    let an = &report["an"];
    let t = an["trajectories"].as_array().unwrap();
    assert_eq!(t.len(), 1, "{an}");
    assert_eq!(sampled_turns(&codec, &t[0]), texts(an));
    let messages: Vec<Message> = serde_json::from_value(t[0]["messages"].clone()).unwrap();
    let full = codec
        .render(&ChatInput {
            messages: messages_to_json(&messages).unwrap(),
            tools: vec![
                serde_json::json!({"type": "function", "function": {"name": "ls",
                "description": "List files.", "parameters": {"type": "object",
                "properties": {"path": {"type": "string"}}}}}),
            ],
            add_generation_prompt: false,
            ..ChatInput::default()
        })
        .unwrap();
    let mut all = ids(&t[0], "prompt_ids");
    all.extend(ids(&t[0], "response_ids"));
    let text = codec.decode(&all, false).unwrap();
    // A last turn cut by max_tokens is closed by the template.
    let closing = if all.last() == Some(&codec.eos_token_id()) {
        ""
    } else {
        codec.eos_token()
    };
    assert_eq!(format!("{text}{closing}\n"), full);

    // Every session the SDKs drove replays identically from its cassette, without the model.
    let lines = std::fs::read_to_string(cassettes.path().join(CASSETTES)).unwrap();
    let mut sessions = Vec::new();
    for line in lines.lines() {
        let cassette = GatewayCassette::from_json(line).unwrap();
        let outcome = replay(&cassette, Codec::from_dir(dir.path()).unwrap())
            .await
            .unwrap();
        assert_eq!(outcome.divergence, None, "session {}", cassette.id);
        sessions.push(cassette.id);
    }
    for s in ["oa", "os", "an"] {
        assert!(sessions.iter().any(|id| id == s), "{sessions:?}");
    }
}
