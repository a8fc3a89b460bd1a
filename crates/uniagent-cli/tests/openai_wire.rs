//! The chat-completions test server against the official `openai` Python package's request
//! shapes (fixtures captured by fixtures/make_openai_fixtures.py): it accepts every request
//! the official client sends, answers in the shape the official client parsed, and the
//! requests of uniagent's own OpenAI backend have the official client's shape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{check_request, tool_call, ChatServer};
use serde_json::{json, Value};
use uniagent_core::{Message, SamplingParams, ToolSpec};
use uniagent_models::{HttpModelConfig, OpenAiChatModel, OpenAiConfig};

fn fixtures() -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (
                name,
                serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 4, "fixtures missing");
    out
}

/// Tool-call arguments are a JSON string; compare what they hold, not their spacing.
fn args(v: &Value) -> Value {
    serde_json::from_str(v.as_str().unwrap_or("null")).unwrap()
}

/// Text content parts joined into one string, as uniagent reads them.
fn flat(messages: &Value) -> Value {
    let mut m = messages.clone();
    for msg in m.as_array_mut().unwrap() {
        if let Some(parts) = msg["content"].as_array() {
            let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            msg["content"] = Value::String(text);
        }
    }
    m
}

/// The capture script's answers: a tool call, or text after a tool result.
fn responder() -> common::Responder {
    Arc::new(|body: &Value| {
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        if last["role"] == "tool" {
            json!({"role": "assistant", "content": "The code is 417."})
        } else {
            tool_call(
                "call_0",
                "execute_bash",
                json!({"command": "cat data/apple.txt"}),
            )
        }
    })
}

#[tokio::test]
async fn the_server_accepts_official_requests_and_answers_as_they_parse() {
    let server = ChatServer::start(responder()).await;
    let client = reqwest::Client::new();
    for (name, fx) in fixtures() {
        let request = &fx["request"];
        assert_eq!(request["path"], "/v1/chat/completions", "{name}");
        assert!(
            request["content_type"]
                .as_str()
                .unwrap()
                .starts_with("application/json"),
            "{name}"
        );
        check_request(&request["body"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let response: Value = client
            .post(format!("{}/chat/completions", server.base_url))
            .json(&request["body"])
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        let parsed = &fx["parsed_response"];
        let choice = &response["choices"][0];
        assert_eq!(response["object"], "chat.completion", "{name}");
        assert_eq!(choice["finish_reason"], parsed["finish_reason"], "{name}");
        assert_eq!(choice["message"]["content"], parsed["content"], "{name}");
        let calls: Vec<Value> = choice["message"]["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| json!({"id": c["id"], "name": c["function"]["name"], "arguments": args(&c["function"]["arguments"])}))
            .collect();
        let expected: Vec<Value> = parsed["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!({"id": c["id"], "name": c["name"], "arguments": args(&c["arguments"])}))
            .collect();
        assert_eq!(calls, expected, "{name}");
        assert_eq!(
            response["usage"]["total_tokens"], parsed["total_tokens"],
            "{name}"
        );
    }
    // A malformed request is refused the way the API refuses it.
    let bad = client
        .post(format!("{}/chat/completions", server.base_url))
        .json(&json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[test]
fn uniagent_requests_have_the_official_shape() {
    let model = OpenAiChatModel::new(&OpenAiConfig {
        http: HttpModelConfig::new(vec!["http://127.0.0.1:1/v1".into()], "replay"),
        text_tool_parser: None,
        extra_body: Default::default(),
    })
    .unwrap();
    for (name, fx) in fixtures() {
        let body = &fx["request"]["body"];
        let messages: Vec<Message> = serde_json::from_value(body["messages"].clone())
            .unwrap_or_else(|e| panic!("{name}: uniagent cannot read these messages: {e}"));
        let tools: Vec<ToolSpec> =
            serde_json::from_value(body.get("tools").cloned().unwrap_or(json!([]))).unwrap();
        let ours =
            serde_json::to_value(model.request_body(&messages, &tools, &SamplingParams::default()))
                .unwrap();
        check_request(&ours).unwrap();
        assert_eq!(ours["model"], body["model"], "{name}");
        // Text parts are sent as one string, which the API treats the same.
        assert_eq!(
            ours["messages"],
            flat(&body["messages"]),
            "{name}: messages differ"
        );
        if body.get("tools").is_some() {
            assert_eq!(ours["tools"], body["tools"], "{name}: tools differ");
        }
    }
}
