//! The Responses API route (`/sessions/{id}/v1/responses`) at the HTTP level, over the real
//! codec (Qwen2.5 tokenizer and template) and a scripted generator: function calls answered
//! through `previous_response_id` in one token chain, the same conversation sent back item by
//! item, typed SSE events, `store: false`, cut answers, and typed errors. Every session replays
//! from its cassette.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{sampled, serve, sse};
use serde_json::{json, Value};
use uniagent_core::codec::{messages_to_json, ChatInput};
use uniagent_core::Message;
use uniagent_gateway::GatewayConfig;

fn ls_tool() -> Value {
    json!({"type": "function", "name": "ls", "description": "List a directory.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}})
}

const CALL: &str =
    "Let me look.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \"/\"}}\n</tool_call>";

#[tokio::test]
async fn function_calls_chain_through_previous_response_id_in_one_token_chain() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    let first_ids = s.turn(CALL);
    let second_ids = s.turn("There are two files.");
    s.script.push_ids(first_ids.clone());
    s.script.push_ids(second_ids.clone());
    let path = "/sessions/r/v1/responses";
    let (status, r1) = s
        .post(
            path,
            &json!({"model": "m", "instructions": "Be brief.", "input": "what is in /?",
            "tools": [ls_tool()]}),
        )
        .await;
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["object"], "response");
    assert_eq!(r1["status"], "completed");
    let output = r1["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["content"][0]["text"], "Let me look.");
    let call = &output[1];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "ls");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "/"}));
    assert_eq!(r1["usage"]["output_tokens"], first_ids.len());
    // Only the tool's output is sent; the gateway has the rest.
    let (status, r2) = s
        .post(
            path,
            &json!({"model": "m", "instructions": "Be brief.", "previous_response_id": r1["id"],
            "tools": [ls_tool()], "input": [{"type": "function_call_output",
            "call_id": call["call_id"], "output": "a.txt b.txt"}]}),
        )
        .await;
    assert_eq!(status, 200, "{r2}");
    assert_eq!(r2["previous_response_id"], r1["id"]);
    assert_eq!(
        r2["output"][0]["content"][0]["text"],
        "There are two files."
    );
    let prompts = s.script.prompts();
    assert!(prompts[1].starts_with(&prompts[0]), "append-only");
    let t = s.end("r").await;
    assert_eq!(t.len(), 1, "one chain");
    // Token-exact: the sampled runs are the generator's ids, and the prompt is the
    // template's render of the first request.
    let expected: Vec<u64> = first_ids
        .iter()
        .chain(&second_ids)
        .map(|&i| u64::from(i))
        .collect();
    assert_eq!(sampled(&t[0]), expected);
    let tools = json!([{"type": "function", "function": {"name": "ls",
        "description": "List a directory.", "parameters": ls_tool()["parameters"]}}]);
    let render = s
        .codec
        .render_ids(&ChatInput {
            messages: messages_to_json(&[
                Message::system("Be brief."),
                Message::user("what is in /?"),
            ])
            .unwrap(),
            tools: tools.as_array().unwrap().clone(),
            add_generation_prompt: true,
            ..ChatInput::default()
        })
        .unwrap();
    let prompt: Vec<u32> = t[0]["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(prompt, render);
}

#[tokio::test]
async fn output_items_sent_back_by_hand_continue_the_same_chain() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn(CALL));
    s.script.push_ids(s.turn("Two files."));
    let path = "/sessions/m/v1/responses";
    let mut input = vec![json!({"role": "user", "content": "what is in /?"})];
    let (status, r1) = s
        .post(
            path,
            &json!({"model": "m", "input": input, "tools": [ls_tool()], "store": false}),
        )
        .await;
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["store"], false);
    input.extend(r1["output"].as_array().unwrap().iter().cloned());
    let call_id = r1["output"][1]["call_id"].clone();
    input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "a b"}));
    let (status, r2) = s
        .post(
            path,
            &json!({"model": "m", "input": input, "tools": [ls_tool()], "store": false}),
        )
        .await;
    assert_eq!(status, 200, "{r2}");
    // `store: false`: the first answer cannot be continued by id.
    let (status, e) = s
        .post(
            path,
            &json!({"model": "m", "previous_response_id": r1["id"], "input": "again"}),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["code"], "previous_response_not_found");
    let t = s.end("m").await;
    assert_eq!(
        t.len(),
        1,
        "the echoed items rebuild the same conversation: {t:?}"
    );
    assert_eq!(t[0]["counts"]["turns"], 2, "{}", t[0]["counts"]);
}

#[tokio::test]
async fn streamed_responses_are_typed_events_ending_in_the_full_response() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn(CALL));
    let (status, body) = s
        .post_raw(
            "/sessions/st/v1/responses",
            &json!({"model": "m", "input": "list /", "tools": [ls_tool()], "stream": true})
                .to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let events = sse(&body);
    let kinds: Vec<&str> = events.iter().map(|(e, _)| e.as_deref().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (kind, data)) in events.iter().enumerate() {
        let data: Value = serde_json::from_str(data).unwrap();
        assert_eq!(data["type"], kind.as_deref().unwrap());
        assert_eq!(data["sequence_number"], i);
    }
    let last: Value = serde_json::from_str(&events[12].1).unwrap();
    assert_eq!(last["response"]["status"], "completed");
    assert_eq!(last["response"]["output"][1]["name"], "ls");
    let created: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(created["response"]["id"], last["response"]["id"]);
    assert_eq!(created["response"]["status"], "in_progress");
    s.end("st").await;
}

#[tokio::test]
async fn a_cut_answer_is_incomplete_and_bad_requests_are_typed() {
    let s = serve("qwen2.5", GatewayConfig::default()).await;
    s.script.push_ids(s.turn("one two three four five six"));
    let path = "/sessions/c/v1/responses";
    let (status, r) = s
        .post(
            path,
            &json!({"model": "m", "input": "count", "max_output_tokens": 2}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(r["usage"]["output_tokens"], 2);
    let (status, e) = s
        .post(
            path,
            &json!({"model": "m", "input": "x", "previous_response_id": "resp-nope"}),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["code"], "previous_response_not_found");
    let (status, e) = s
        .post(
            path,
            &json!({"model": "m", "input": "x", "tools": [{"type": "file_search"}]}),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("file_search"),
        "{e}"
    );
    let (status, _) = s.post_raw(path, "{not json").await;
    assert_eq!(status, 400);
    s.end("c").await;
}

#[tokio::test]
async fn reasoning_is_an_output_item_and_comes_back_as_the_turns_reasoning() {
    let s = serve("qwen3", GatewayConfig::default()).await;
    let first = s.turn(&format!("<think>\nI should list it.\n</think>\n\n{CALL}"));
    s.script.push_ids(first.clone());
    s.script
        .push_ids(s.turn("<think>\nDone.\n</think>\n\nTwo files."));
    let path = "/sessions/q/v1/responses";
    let mut input = vec![json!({"role": "user", "content": "what is in /?"})];
    let (status, r1) = s
        .post(
            path,
            &json!({"model": "m", "input": input, "tools": [ls_tool()]}),
        )
        .await;
    assert_eq!(status, 200, "{r1}");
    let output = r1["output"].as_array().unwrap();
    let kinds: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reasoning", "message", "function_call"]);
    assert_eq!(output[0]["content"][0]["type"], "reasoning_text");
    assert_eq!(output[0]["content"][0]["text"], "I should list it.");
    assert_eq!(output[1]["content"][0]["text"], "Let me look.");
    // Sent back by hand, the reasoning, the message and the call are one assistant turn
    // again, reasoning included (Qwen3 keeps it within a tool loop): the next prompt is the
    // first plus the answer's tokens as sampled.
    input.extend(output.iter().cloned());
    input.push(
        json!({"type": "function_call_output", "call_id": output[2]["call_id"], "output": "a b"}),
    );
    let (status, r2) = s
        .post(
            path,
            &json!({"model": "m", "input": input, "tools": [ls_tool()]}),
        )
        .await;
    assert_eq!(status, 200, "{r2}");
    let prompts = s.script.prompts();
    let mut sampled_first = prompts[0].clone();
    sampled_first.extend(&first);
    assert!(
        prompts[1].starts_with(&sampled_first),
        "the second prompt holds the first answer's tokens as sampled"
    );
    let t = s.end("q").await;
    assert_eq!(t.len(), 1, "one chain");
}
