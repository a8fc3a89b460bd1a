//! Anthropic messages on the wire: request → [`TurnRequest`] (system string or blocks,
//! `tool_use` / `tool_result` blocks as OpenAI tool calls and tool messages), [`TurnAnswer`] →
//! message body or SSE events.

use serde_json::{json, Map, Value};
use uniagent_core::{Message, ToolCall, ToolSpec};

use super::openai::temperature_and_top_p;
use crate::error::{GatewayError, Result};
use crate::turn::{Finish, ToolChoice, TurnAnswer, TurnRequest};

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::invalid(message)
}

fn text_of(v: &Value, what: &str) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut text = String::new();
            for b in blocks {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(invalid(format!(
                            "{what}: only text blocks are supported here, got {b}"
                        )))
                    }
                }
            }
            Ok(text)
        }
        Value::Null => Ok(String::new()),
        other => Err(invalid(format!(
            "{what} must be a string or a list of blocks, got {other}"
        ))),
    }
}

/// Parses a messages body; returns the request and `stream`.
pub fn parse_request(body: &[u8]) -> Result<(TurnRequest, bool)> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("messages body: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| invalid("the body must be a JSON object"))?;
    let max_tokens = obj
        .get("max_tokens")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .ok_or_else(|| invalid("`max_tokens` is required and must be a positive integer"))?;
    let mut messages = Vec::new();
    if let Some(system) = obj.get("system").filter(|s| !s.is_null()) {
        messages.push(Message::system(text_of(system, "`system`")?));
    }
    let wire = obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("`messages` must be a list"))?;
    for m in wire {
        convert_message(m, &mut messages)?;
    }
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ts)) => ts.iter().map(convert_tool).collect::<Result<_>>()?,
        Some(other) => return Err(invalid(format!("`tools` must be a list, got {other}"))),
    };
    let tool_choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(c) => match c.get("type").and_then(Value::as_str) {
            Some("auto") => ToolChoice::Auto,
            Some("any") => ToolChoice::Required,
            Some("none") => ToolChoice::None,
            Some("tool") => ToolChoice::Function(
                c.get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("`tool_choice` of type tool needs a name"))?
                    .to_owned(),
            ),
            _ => return Err(invalid(format!("unsupported `tool_choice` {c}"))),
        },
    };
    let mut sampling = temperature_and_top_p(obj, 1.0)?;
    if let Some(k) = obj.get("top_k").filter(|v| !v.is_null()) {
        let k = k
            .as_u64()
            .ok_or_else(|| invalid("`top_k` must be a non-negative integer"))?;
        sampling.top_k = (k > 0).then_some(k as u32);
    }
    let stop = match obj.get("stop_sequences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(s)) => s
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid("`stop_sequences` must be strings"))
            })
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(invalid(format!(
                "`stop_sequences` must be a list, got {other}"
            )))
        }
    };
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(invalid(format!("`stream` must be a boolean, got {other}"))),
    };
    let req = TurnRequest {
        messages,
        tools,
        tool_choice,
        sampling,
        max_tokens: Some(max_tokens as usize),
        stop,
    };
    Ok((req, stream))
}

fn convert_tool(t: &Value) -> Result<ToolSpec> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("a tool needs a name: {t}")))?;
    let description = t.get("description").and_then(Value::as_str).unwrap_or("");
    let schema = t
        .get("input_schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    Ok(ToolSpec::function(name, description, schema))
}

/// One wire message → OpenAI-style messages: a user turn's `tool_result` blocks become tool
/// messages (in order), its text a user message after them.
fn convert_message(m: &Value, out: &mut Vec<Message>) -> Result<()> {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("");
    let content = m.get("content").unwrap_or(&Value::Null);
    let blocks: Vec<Value> = match content {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        other => {
            return Err(invalid(format!(
                "message content must be a string or blocks, got {other}"
            )))
        }
    };
    match role {
        "user" => {
            let mut text = String::new();
            let mut has_text = false;
            for b in &blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        has_text = true;
                        text.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    Some("tool_result") => {
                        let id = b
                            .get("tool_use_id")
                            .and_then(Value::as_str)
                            .ok_or_else(|| invalid("a tool_result block needs tool_use_id"))?;
                        let body = text_of(
                            b.get("content").unwrap_or(&Value::Null),
                            "tool_result content",
                        )?;
                        out.push(Message::tool(id, body));
                    }
                    _ => return Err(invalid(format!("unsupported user content block {b}"))),
                }
            }
            if has_text {
                out.push(Message::user(text));
            }
        }
        "assistant" => {
            let mut text: Option<String> = None;
            let mut calls = Vec::new();
            let mut reasoning = None;
            for b in &blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => text
                        .get_or_insert_with(String::new)
                        .push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                    Some("tool_use") => {
                        let id = b.get("id").and_then(Value::as_str).unwrap_or("");
                        let name = b
                            .get("name")
                            .and_then(Value::as_str)
                            .ok_or_else(|| invalid("a tool_use block needs a name"))?;
                        let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                        calls.push(ToolCall::new(id, name, input));
                    }
                    Some("thinking") => {
                        reasoning = b.get("thinking").and_then(Value::as_str).map(str::to_owned)
                    }
                    _ => return Err(invalid(format!("unsupported assistant content block {b}"))),
                }
            }
            let mut msg = Message::assistant_with_calls(text, calls);
            msg.reasoning_content = reasoning;
            out.push(msg);
        }
        other => {
            return Err(invalid(format!(
                "message role must be user or assistant, got `{other}`"
            )))
        }
    }
    Ok(())
}

fn stop_reason(f: &Finish) -> (&'static str, Value) {
    match f {
        Finish::Stop => ("end_turn", Value::Null),
        Finish::ToolCalls => ("tool_use", Value::Null),
        Finish::Length => ("max_tokens", Value::Null),
        Finish::StopSequence(s) => ("stop_sequence", Value::String(s.clone())),
    }
}

fn blocks(answer: &TurnAnswer) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(r) = &answer.message.reasoning_content {
        out.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    let text = answer.message.content.as_deref().unwrap_or("");
    if !text.is_empty() || answer.message.tool_calls.is_empty() {
        out.push(json!({"type": "text", "text": text}));
    }
    for call in &answer.message.tool_calls {
        let input = match &call.function.arguments {
            Value::Object(o) => Value::Object(o.clone()),
            other => json!({"arguments": other}),
        };
        out.push(
            json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}),
        );
    }
    out
}

/// The non-streaming response body.
pub fn response(answer: &TurnAnswer, id: &str, model: &str) -> Value {
    let (reason, seq) = stop_reason(&answer.finish);
    json!({"id": id, "type": "message", "role": "assistant", "model": model,
           "content": blocks(answer), "stop_reason": reason, "stop_sequence": seq,
           "usage": {"input_tokens": answer.prompt_tokens, "output_tokens": answer.token_ids.len()},
           "uniagent": {"chain": answer.chain, "format_error": answer.format_error}})
}

/// The `(event, data)` pairs of a streamed response.
pub fn events(answer: &TurnAnswer, id: &str, model: &str) -> Vec<(&'static str, Value)> {
    let (reason, seq) = stop_reason(&answer.finish);
    let mut out = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": answer.prompt_tokens, "output_tokens": 0}}}),
    )];
    for (index, block) in blocks(answer).into_iter().enumerate() {
        let (start, delta) = match block.get("type").and_then(Value::as_str) {
            Some("tool_use") => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
            ),
            Some("thinking") => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                json!({"type": "thinking_delta", "thinking": block["thinking"]}),
            ),
            _ => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            ),
        };
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        out.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        out.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    out.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
               "usage": {"output_tokens": answer.token_ids.len()}}),
    ));
    out.push(("message_stop", json!({"type": "message_stop"})));
    out
}

/// An error body in Anthropic's shape.
pub fn error_body(e: &GatewayError) -> Value {
    let kind = match e.status().as_u16() {
        400 | 409 => "invalid_request_error",
        404 => "not_found_error",
        413 => "request_too_large",
        _ => "api_error",
    };
    let mut err = Map::new();
    err.insert("type".into(), kind.into());
    err.insert("message".into(), e.to_string().into());
    json!({"type": "error", "error": Value::Object(err)})
}
