#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! OpenAI chat-completions bodies survive a round trip through our types unchanged, and the
//! typed view is what the wire means.

use serde_json::{json, Value};
use uniagent_core::openai::{ChatCompletionRequest, ChatCompletionResponse};
use uniagent_core::{Message, Role};

fn load(name: &str) -> Value {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn request_round_trips_and_parses_arguments() {
    let wire = load("openai_request.json");
    let req: ChatCompletionRequest = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(serde_json::to_value(&req).unwrap(), wire);

    let assistant = &req.messages[2];
    assert_eq!(assistant.role, Role::Assistant);
    assert_eq!(
        assistant.reasoning_content.as_deref(),
        Some("The test name suggests an off-by-one.")
    );
    assert_eq!(assistant.tool_calls.len(), 2);
    assert_eq!(
        assistant.tool_calls[0].function.arguments["view_range"],
        json!([1, 40])
    );
    assert_eq!(
        assistant.tool_calls[1].function.arguments["timeout"],
        json!(120)
    );
    assert_eq!(req.messages[3].tool_call_id.as_deref(), Some("call_0"));
    assert_eq!(req.messages[5].content, None);
    assert_eq!(req.tools[1].function.strict, Some(true));
    // Vendor extensions stay available.
    assert_eq!(req.extra["top_k"], json!(20));
    assert_eq!(
        req.extra["chat_template_kwargs"]["enable_thinking"],
        json!(false)
    );
}

#[test]
fn response_round_trips_and_keeps_vendor_fields() {
    let wire = load("openai_response.json");
    let resp: ChatCompletionResponse = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(serde_json::to_value(&resp).unwrap(), wire);
    let choice = &resp.choices[0];
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        choice.message.tool_calls[1].function.arguments["answer"],
        "42"
    );
    assert_eq!(choice.extra["stop_reason"], Value::Null);
    assert_eq!(resp.usage.unwrap().total_tokens, 469);
}

#[test]
fn tool_results_and_assistant_calls_serialise_to_the_wire_format() {
    let call =
        uniagent_core::ToolCall::new("call_9", "execute_bash", json!({"command": "echo \"hi\""}));
    let assistant = Message::assistant_with_calls(None, vec![call]);
    let tool = Message::tool("call_9", "hi\n");
    assert_eq!(
        serde_json::to_value([&assistant, &tool]).unwrap(),
        json!([
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
             "function": {"name": "execute_bash", "arguments": "{\"command\":\"echo \\\"hi\\\"\"}"}}]},
            {"role": "tool", "content": "hi\n", "tool_call_id": "call_9"}
        ])
    );
}

proptest::proptest! {
    /// Any text a model emits as `arguments` comes back out byte for byte.
    #[test]
    fn arbitrary_argument_strings_round_trip(raw in ".*") {
        let wire = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": raw}}]});
        let msg: Message = serde_json::from_value(wire).unwrap();
        let back = serde_json::to_value(&msg).unwrap();
        let out = back["tool_calls"][0]["function"]["arguments"].as_str().unwrap().to_owned();
        let parsed_in: Result<Value, _> = serde_json::from_str(&raw);
        match parsed_in {
            // Objects may be re-serialised compactly, but must mean the same.
            Ok(v @ Value::Object(_)) => proptest::prop_assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), v),
            _ => proptest::prop_assert_eq!(out, raw),
        }
    }
}
