//! The OpenAI Responses API on the wire: request → [`TurnRequest`] (input items as messages,
//! `instructions` as the system message, function tools), [`TurnAnswer`] → response object or
//! typed SSE events (`response.created` … `response.completed`).
//!
//! Conversation state (`previous_response_id`) is the gateway's: a stored response is the
//! conversation it answered, without its `instructions` (which, as in the Responses API, are not
//! carried over), plus its answer. [`ResponsesRequest::into_turn`] puts the stored history in
//! front of the new input.

use serde_json::{json, Map, Value};
use uniagent_core::{Message, ToolCall, ToolSpec};

use super::openai::temperature_and_top_p;
use crate::error::{GatewayError, Result};
use crate::turn::{Finish, ToolChoice, TurnAnswer, TurnRequest};

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::invalid(message)
}

/// Request fields the response object echoes, and what the route does besides sampling.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesOptions {
    /// `stream`.
    pub stream: bool,
    /// `store` (default true): keep the response for later `previous_response_id`s.
    pub store: bool,
    /// `previous_response_id`.
    pub previous_response_id: Option<String>,
    /// The fields echoed in the response object as the client sent them.
    pub echo: Map<String, Value>,
}

/// A parsed request before its history is known.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    /// `instructions`, as the first (system) message of this request only.
    pub instructions: Option<String>,
    /// The `input` items as messages.
    pub input: Vec<Message>,
    /// The request without its messages.
    pub turn: TurnRequest,
    /// Options and echoed fields.
    pub options: ResponsesOptions,
}

impl ResponsesRequest {
    /// The request to sample: the instructions, then `history` (the stored conversation of
    /// `previous_response_id`), then the input.
    pub fn into_turn(self, history: &[Message]) -> (TurnRequest, Vec<Message>, ResponsesOptions) {
        let mut conversation = history.to_vec();
        conversation.extend(self.input);
        let mut turn = self.turn;
        turn.messages = self
            .instructions
            .map(Message::system)
            .into_iter()
            .chain(conversation.iter().cloned())
            .collect();
        (turn, conversation, self.options)
    }
}

/// Fields the gateway rejects rather than ignore: honouring them would change the answer.
const UNSUPPORTED: [(&str, &str); 5] = [
    ("background", "background responses"),
    (
        "conversation",
        "conversation objects (use previous_response_id)",
    ),
    ("prompt", "prompt templates"),
    ("max_tool_calls", "max_tool_calls"),
    ("top_logprobs", "top_logprobs"),
];

/// Echoed in the response object when the client sent them.
const ECHOED: [&str; 12] = [
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "reasoning",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
];

/// Parses a responses body.
pub fn parse_request(body: &[u8]) -> Result<ResponsesRequest> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("responses body: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| invalid("the body must be a JSON object"))?;
    for (key, what) in UNSUPPORTED {
        match obj.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Number(n)) if key == "top_logprobs" && n.as_u64() == Some(0) => {}
            Some(_) => return Err(invalid(format!("`{key}`: {what} are not supported here"))),
        }
    }
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")) {
        if format.get("type").and_then(Value::as_str) != Some("text") {
            return Err(invalid(format!(
                "`text.format` {format}: only plain text is supported (structured outputs are not enforced on sampling)"
            )));
        }
    }
    if let Some(t) = obj.get("truncation").filter(|t| !t.is_null()) {
        if t != "disabled" {
            return Err(invalid(format!(
                "`truncation` {t}: only \"disabled\" is supported (a conversation over the context window is an error)"
            )));
        }
    }
    let instructions = match obj.get("instructions") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(invalid(format!(
                "`instructions` must be a string, got {other}"
            )))
        }
    };
    let input = match obj.get("input") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![Message::user(s.clone())],
        Some(Value::Array(items)) => input_messages(items)?,
        Some(other) => {
            return Err(invalid(format!(
                "`input` must be a string or a list of items, got {other}"
            )))
        }
    };
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ts)) => ts.iter().map(tool_spec).collect::<Result<_>>()?,
        Some(other) => return Err(invalid(format!("`tools` must be a list, got {other}"))),
    };
    let tool_choice = tool_choice(obj.get("tool_choice"))?;
    let sampling = temperature_and_top_p(obj, 2.0)?;
    let max_tokens = match obj.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(n) => match n.as_u64() {
            Some(n) if n > 0 => Some(n as usize),
            _ => {
                return Err(invalid(format!(
                    "`max_output_tokens` must be a positive integer, got {n}"
                )))
            }
        },
    };
    let flag = |key: &str, default: bool| match obj.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(invalid(format!("`{key}` must be a boolean, got {other}"))),
    };
    let previous_response_id = match obj.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(other) => {
            return Err(invalid(format!(
                "`previous_response_id` must be a response id, got {other}"
            )))
        }
    };
    let echo = ECHOED
        .iter()
        .filter_map(|k| obj.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    Ok(ResponsesRequest {
        instructions,
        input,
        turn: TurnRequest {
            messages: Vec::new(),
            tools,
            tool_choice,
            sampling,
            max_tokens,
            stop: Vec::new(),
        },
        options: ResponsesOptions {
            stream: flag("stream", false)?,
            store: flag("store", true)?,
            previous_response_id,
            echo,
        },
    })
}

fn tool_spec(t: &Value) -> Result<ToolSpec> {
    match t.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(other) => {
            return Err(invalid(format!(
                "tool type `{other}` is not supported here: only function tools are"
            )))
        }
        None => return Err(invalid(format!("a tool without a `type`: {t}"))),
    }
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid(format!("a function tool needs a `name`: {t}")))?;
    let description = t.get("description").and_then(Value::as_str).unwrap_or("");
    let parameters = match t.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p) => p.clone(),
    };
    let mut spec = ToolSpec::function(name, description, parameters);
    if t.get("description").and_then(Value::as_str).is_none() {
        spec.function.description = None;
    }
    spec.function.strict = t.get("strict").and_then(Value::as_bool);
    Ok(spec)
}

fn tool_choice(v: Option<&Value>) -> Result<ToolChoice> {
    Ok(match v {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => return Err(invalid(format!("unsupported `tool_choice` \"{other}\""))),
        },
        Some(c) if c.get("type").and_then(Value::as_str) == Some("function") => {
            ToolChoice::Function(
                c.get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("`tool_choice` of type function needs a name"))?
                    .to_owned(),
            )
        }
        Some(c) => return Err(invalid(format!("unsupported `tool_choice` {c}"))),
    })
}

/// The text of a message's content: a string, or a list of text parts.
fn content_text(content: &Value, what: &str) -> Result<String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("input_text" | "output_text"), Some(Value::String(t))) => {
                        text.push_str(t)
                    }
                    (Some(kind), _) => {
                        return Err(invalid(format!(
                        "{what}: content parts of type `{kind}` are not supported here (text only)"
                    )))
                    }
                    (None, _) => {
                        return Err(invalid(format!("{what}: a content part without a type")))
                    }
                }
            }
            Ok(text)
        }
        other => Err(invalid(format!(
            "{what}: content must be a string or a list of parts, got {other}"
        ))),
    }
}

/// The input items as messages: consecutive assistant output (reasoning, message, function
/// calls) becomes one assistant message, as the model produced it in one turn.
fn input_messages(items: &[Value]) -> Result<Vec<Message>> {
    let mut messages: Vec<Message> = Vec::new();
    // Whether the last message is an assistant turn items may still join.
    let mut open_turn = false;
    for (i, item) in items.iter().enumerate() {
        let what = format!("input[{i}]");
        let kind = item.get("type").and_then(Value::as_str);
        let role = item.get("role").and_then(Value::as_str);
        match (kind, role) {
            (Some("message") | None, Some(role)) => {
                let text = content_text(item.get("content").unwrap_or(&Value::Null), &what)?;
                match role {
                    "user" => messages.push(Message::user(text)),
                    "system" | "developer" => messages.push(Message::system(text)),
                    "assistant" => {
                        let joins = open_turn
                            && messages.last().is_some_and(|m| {
                                m.content.as_deref().unwrap_or("").is_empty()
                                    && m.tool_calls.is_empty()
                            });
                        if joins {
                            if let Some(last) = messages.last_mut() {
                                last.content = Some(text);
                            }
                        } else {
                            messages.push(Message::assistant(text));
                        }
                        open_turn = true;
                        continue;
                    }
                    other => return Err(invalid(format!("{what}: unknown role `{other}`"))),
                }
                open_turn = false;
            }
            (Some("reasoning"), _) => {
                let text = reasoning_text(item);
                let mut turn = Message::assistant("");
                turn.content = None;
                turn.reasoning_content = Some(text);
                messages.push(turn);
                open_turn = true;
            }
            (Some("function_call"), _) => {
                let call = function_call(item, &what)?;
                if !(open_turn && messages.last().is_some()) {
                    let mut turn = Message::assistant("");
                    turn.content = None;
                    messages.push(turn);
                }
                if let Some(last) = messages.last_mut() {
                    last.tool_calls.push(call);
                }
                open_turn = true;
            }
            (Some("function_call_output"), _) => {
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(format!("{what}: `call_id` is required")))?;
                let output = content_text(item.get("output").unwrap_or(&Value::Null), &what)?;
                messages.push(Message::tool(call_id, output));
                open_turn = false;
            }
            (Some(other), _) => {
                return Err(invalid(format!(
                    "{what}: items of type `{other}` are not supported here"
                )))
            }
            (None, None) => {
                return Err(invalid(format!(
                    "{what}: an item needs a `type` or a `role`"
                )))
            }
        }
    }
    Ok(messages)
}

fn reasoning_text(item: &Value) -> String {
    let texts = |key: &str| -> Vec<String> {
        item.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned))
            .collect()
    };
    let content = texts("content");
    if content.is_empty() {
        texts("summary").join("\n\n")
    } else {
        content.concat()
    }
}

fn function_call(item: &Value, what: &str) -> Result<ToolCall> {
    let call_id = item
        .get("call_id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{what}: `call_id` is required")))?;
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{what}: `name` is required")))?;
    let arguments = item
        .get("arguments")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{what}: `arguments` must be a string")))?;
    // Through the chat shape, so that the arguments' wire text is kept byte for byte.
    serde_json::from_value(json!({"id": call_id, "type": "function",
        "function": {"name": name, "arguments": arguments}}))
    .map_err(|e| invalid(format!("{what}: {e}")))
}

/// The output items of `answer` in response `id`.
fn output_items(answer: &TurnAnswer, id: &str, status: &str) -> Vec<Value> {
    let message = &answer.message;
    let mut items = Vec::new();
    if let Some(reasoning) = message
        .reasoning_content
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        items.push(
            json!({"type": "reasoning", "id": format!("rs_{id}"), "summary": [],
            "content": [{"type": "reasoning_text", "text": reasoning}], "status": status}),
        );
    }
    let text = message.content.as_deref().unwrap_or("");
    if !text.is_empty() || message.tool_calls.is_empty() {
        items.push(
            json!({"type": "message", "id": format!("msg_{id}"), "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}),
        );
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        items.push(
            json!({"type": "function_call", "id": format!("fc_{id}_{i}"),
            "call_id": call.id, "name": call.function.name,
            "arguments": call.function.arguments_wire(), "status": "completed"}),
        );
    }
    items
}

fn status_of(answer: &TurnAnswer) -> (&'static str, Value) {
    match answer.finish {
        Finish::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
        _ => ("completed", Value::Null),
    }
}

/// What every response object of one answer shares.
struct Head<'a> {
    id: &'a str,
    model: &'a str,
    created: u64,
    options: &'a ResponsesOptions,
}

/// The response object, with `output` and `status` given.
fn response_object(
    head: &Head<'_>,
    status: &str,
    output: Vec<Value>,
    usage: Value,
    incomplete: Value,
) -> Value {
    let Head {
        id,
        model,
        created,
        options,
    } = *head;
    let echo = |key: &str, default: Value| options.echo.get(key).cloned().unwrap_or(default);
    json!({
        "id": id, "object": "response", "created_at": created, "status": status,
        "background": false, "error": null, "incomplete_details": incomplete,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "metadata": echo("metadata", json!({})),
        "model": model, "output": output,
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": options.previous_response_id,
        "reasoning": echo("reasoning", json!({"effort": null, "summary": null})),
        "store": options.store,
        "temperature": echo("temperature", json!(1.0)),
        "text": echo("text", json!({"format": {"type": "text"}})),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "top_p": echo("top_p", json!(1.0)),
        "truncation": echo("truncation", json!("disabled")),
        "usage": usage,
        "user": echo("user", Value::Null),
    })
}

fn usage(answer: &TurnAnswer) -> Value {
    let output = answer.token_ids.len();
    json!({"input_tokens": answer.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": answer.prompt_tokens + output})
}

/// The non-streaming response body of `answer`.
pub fn response(
    answer: &TurnAnswer,
    id: &str,
    model: &str,
    created: u64,
    options: &ResponsesOptions,
) -> Value {
    let (status, incomplete) = status_of(answer);
    let head = Head {
        id,
        model,
        created,
        options,
    };
    let mut body = response_object(
        &head,
        status,
        output_items(answer, id, status),
        usage(answer),
        incomplete,
    );
    body["uniagent"] = json!({"chain": answer.chain, "format_error": answer.format_error});
    body
}

/// The events of a streamed response: `(event type, data)`, each data carrying its `type` and
/// `sequence_number`.
pub fn events(
    answer: &TurnAnswer,
    id: &str,
    model: &str,
    created: u64,
    options: &ResponsesOptions,
) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut push = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(out.len());
        out.push((kind.to_owned(), data));
    };
    let head = Head {
        id,
        model,
        created,
        options,
    };
    let start = response_object(&head, "in_progress", Vec::new(), Value::Null, Value::Null);
    push("response.created", json!({"response": start}));
    push("response.in_progress", json!({"response": start}));
    let (status, _) = status_of(answer);
    for (index, item) in output_items(answer, id, status).into_iter().enumerate() {
        let item_id = item["id"].clone();
        let mut opened = item.clone();
        if item["status"].is_string() {
            opened["status"] = json!("in_progress");
        }
        match item["type"].as_str() {
            Some("message") => {
                opened["content"] = json!([]);
                push(
                    "response.output_item.added",
                    json!({"output_index": index, "item": opened}),
                );
                let text = item["content"][0]["text"].clone();
                let at = json!({"item_id": item_id, "output_index": index, "content_index": 0});
                let with = |mut base: Value, extra: Value| {
                    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
                        b.extend(e.clone());
                    }
                    base
                };
                push(
                    "response.content_part.added",
                    with(
                        at.clone(),
                        json!({"part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                    ),
                );
                push(
                    "response.output_text.delta",
                    with(at.clone(), json!({"delta": text, "logprobs": []})),
                );
                push(
                    "response.output_text.done",
                    with(at.clone(), json!({"text": text, "logprobs": []})),
                );
                push(
                    "response.content_part.done",
                    with(at, json!({"part": item["content"][0]})),
                );
            }
            Some("function_call") => {
                opened["arguments"] = json!("");
                opened["status"] = json!("in_progress");
                push(
                    "response.output_item.added",
                    json!({"output_index": index, "item": opened}),
                );
                push(
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": index, "delta": item["arguments"]}),
                );
                push(
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": index, "name": item["name"],
                        "arguments": item["arguments"]}),
                );
            }
            _ => push(
                "response.output_item.added",
                json!({"output_index": index, "item": opened}),
            ),
        }
        push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }
    let done = if status == "incomplete" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    push(
        done,
        json!({"response": response(answer, id, model, created, options)}),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_items_come_back_as_the_turn_the_model_made() {
        let body = json!({"model": "m", "instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "list"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "content": [{"type": "reasoning_text", "text": "I should call ls."}]},
            {"type": "message", "role": "assistant", "id": "msg_1",
             "content": [{"type": "output_text", "text": "Listing.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_0", "name": "ls",
             "arguments": "{\"path\":  \".\"}"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_1", "name": "ls",
             "arguments": "{\"path\": \"/\"}"},
            {"type": "function_call_output", "call_id": "call_0", "output": "a.txt"},
            {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "etc"}]},
        ]});
        let parsed = parse_request(body.to_string().as_bytes()).unwrap();
        let history = [Message::user("earlier")];
        let (turn, conversation, options) = parsed.into_turn(&history);
        assert!(options.store && !options.stream);
        assert_eq!(turn.messages[0], Message::system("Be brief."));
        assert_eq!(turn.messages[1], Message::user("earlier"));
        // The conversation kept for the next response has no instructions.
        assert_eq!(conversation.len(), 5, "{conversation:?}");
        let assistant = &turn.messages[3];
        assert_eq!(assistant.content.as_deref(), Some("Listing."));
        assert_eq!(
            assistant.reasoning_content.as_deref(),
            Some("I should call ls.")
        );
        assert_eq!(assistant.tool_calls.len(), 2);
        // The arguments' wire text is kept, spacing included.
        assert_eq!(
            assistant.tool_calls[0].function.arguments_wire(),
            "{\"path\":  \".\"}"
        );
        assert_eq!(turn.messages[4], Message::tool("call_0", "a.txt"));
        assert_eq!(turn.messages[5], Message::tool("call_1", "etc"));
    }

    #[test]
    fn what_would_change_the_answer_is_refused_by_name() {
        for (body, needle) in [
            (json!({"input": "x", "background": true}), "background"),
            (
                json!({"input": "x", "tools": [{"type": "web_search"}]}),
                "web_search",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
                "input_image",
            ),
            (
                json!({"input": "x", "text": {"format": {"type": "json_object"}}}),
                "text.format",
            ),
            (json!({"input": "x", "truncation": "auto"}), "truncation"),
            (
                json!({"input": [{"type": "item_reference", "id": "x"}]}),
                "item_reference",
            ),
            (
                json!({"input": "x", "max_output_tokens": 0}),
                "max_output_tokens",
            ),
            (json!({"input": "x", "store": "yes"}), "store"),
        ] {
            let err = parse_request(body.to_string().as_bytes()).unwrap_err();
            assert!(err.to_string().contains(needle), "{body}: {err}");
            assert_eq!(err.status(), 400);
        }
    }
}
