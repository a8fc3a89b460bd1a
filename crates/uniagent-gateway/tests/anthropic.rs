//! The Anthropic messages route: system as string or blocks, `tool_use` / `tool_result`
//! blocks continuing one chain, the streamed event sequence, and typed errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{sampled, serve, sse};
use serde_json::{json, Value};
use uniagent_gateway::GatewayConfig;

fn tools() -> Value {
    json!([{"name": "ls", "description": "List a directory.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}])
}

#[tokio::test]
async fn tool_use_and_tool_result_blocks_extend_one_chain() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn(
        "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"/srv\"}}\n</tool_call>",
    ));
    s.script.push_ids(s.turn("Empty."));
    let mut messages = vec![json!({"role": "user", "content": "what is in /srv?"})];
    let body = |m: &Vec<Value>, system: Value| json!({"model": "m", "max_tokens": 64, "system": system, "tools": tools(), "messages": m});
    let path = "/sessions/an/v1/messages";
    let (status, r1) = s.post(path, &body(&messages, json!("Be brief."))).await;
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["type"], "message");
    assert_eq!(r1["stop_reason"], "tool_use");
    let block = &r1["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["input"], json!({"path": "/srv"}));
    messages.push(json!({"role": "assistant", "content": r1["content"]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": block["id"], "content": [{"type": "text", "text": "(empty)"}]}]}));
    // The system prompt as blocks is the same system prompt.
    let system = json!([{"type": "text", "text": "Be brief."}]);
    let (status, r2) = s.post(path, &body(&messages, system)).await;
    assert_eq!(status, 200, "{r2}");
    assert_eq!(r2["content"], json!([{"type": "text", "text": "Empty."}]));
    assert_eq!(r2["stop_reason"], "end_turn");
    let prompts = s.script.prompts();
    let first = s.codec.decode(&prompts[0], false).unwrap();
    assert!(
        first.starts_with("<|im_start|>system\nBe brief."),
        "{first}"
    );
    let second = s.codec.decode(&prompts[1], false).unwrap();
    assert!(
        second.contains("<tool_response>\n(empty)\n</tool_response>"),
        "{second}"
    );
    assert!(prompts[1].starts_with(&prompts[0]));
    let t = s.end("an").await;
    assert_eq!(t.len(), 1);
    let mut want: Vec<u64> = s
        .turn("<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"/srv\"}}\n</tool_call>")
        .iter()
        .map(|&i| i as u64)
        .collect();
    want.extend(s.turn("Empty.").iter().map(|&i| i as u64));
    assert_eq!(sampled(&t[0]), want);
}

#[tokio::test]
async fn streaming_emits_the_message_event_sequence() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn(
        "Checking.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"/\"}}\n</tool_call>",
    ));
    let body = json!({"model": "m", "max_tokens": 64, "stream": true, "tools": tools(),
                      "messages": [{"role": "user", "content": "ls /"}]});
    let (status, text) = s
        .post_raw("/sessions/as/v1/messages", &body.to_string())
        .await;
    assert_eq!(status, 200, "{text}");
    let events = sse(&text);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let data: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    // The text as sampled up to the newline the template itself writes before the tool call.
    assert_eq!(data[2]["delta"]["text"], "Checking.");
    assert_eq!(data[4]["content_block"]["type"], "tool_use");
    let input: Value =
        serde_json::from_str(data[5]["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"path": "/"}));
    assert_eq!(data[7]["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn bad_bodies_are_anthropic_errors() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    for body in [
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "system", "content": "hi"}]}),
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]}),
        json!({"model": "m", "max_tokens": 8, "temperature": 3, "messages": [{"role": "user", "content": "hi"}]}),
    ] {
        let (status, v) = s.post("/sessions/ae/v1/messages", &body).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
}

/// A harness that rewrites an earlier assistant turn gets its reply recorded at the end of a
/// chain, as on the OpenAI route (the rewritten turn is context there, mask 0).
#[tokio::test]
async fn a_rewritten_earlier_assistant_turn_still_records_the_reply() {
    for (one, two, three) in [("One.", "Two.", "Three."), (" One. ", "\nTwo ", "  Three.")] {
        let s = serve("qwen2.5", GatewayConfig::default()).await;
        for text in [one, two, three] {
            s.script.push_ids(s.turn(text));
        }
        let user = |t: &str| json!({"role": "user", "content": t});
        let asst = |t: &str| json!({"role": "assistant", "content": [{"type": "text", "text": t}]});
        let ask = |m: Vec<Value>| json!({"model": "m", "max_tokens": 32, "messages": m});
        let path = "/sessions/rw/v1/messages";
        let (status, r) = s.post(path, &ask(vec![user("u1")])).await;
        assert_eq!(status, 200, "{r}");
        let first = r["content"][0]["text"].as_str().unwrap().to_owned();
        let (status, r) = s
            .post(path, &ask(vec![user("u1"), asst(&first), user("u2")]))
            .await;
        assert_eq!(status, 200, "{r}");
        let second = r["content"][0]["text"].as_str().unwrap().to_owned();
        let (status, r) = s
            .post(
                path,
                &ask(vec![
                    user("u1"),
                    asst("Rewritten."),
                    user("u2"),
                    asst(&second),
                    user("u3"),
                ]),
            )
            .await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["content"][0]["text"], three);
        let chains = s.end("rw").await;
        let last_sampled: Vec<u64> = s.turn(three).iter().map(|&i| i as u64).collect();
        let ends_with_reply = chains.iter().any(|t| {
            let got = sampled(t);
            got.ends_with(&last_sampled)
                && t["messages"].as_array().unwrap().last().unwrap()["content"]
                    .to_string()
                    .contains("Three.")
        });
        assert!(
            ends_with_reply,
            "{three:?}: no chain ends with the reply: {chains:#?}"
        );
    }
}
