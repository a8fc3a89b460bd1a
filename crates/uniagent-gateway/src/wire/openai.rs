//! OpenAI chat completions on the wire: request → [`TurnRequest`], [`TurnAnswer`] → response
//! body or `chat.completion.chunk` events.

use serde_json::{json, Map, Value};
use uniagent_core::openai::ChatCompletionRequest;
use uniagent_core::SamplingParams;

use crate::error::{GatewayError, Result};
use crate::turn::{Finish, ToolChoice, TurnAnswer, TurnRequest};

/// What the route needs besides the [`TurnRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiOptions {
    /// `stream`.
    pub stream: bool,
    /// `logprobs`.
    pub logprobs: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

/// Parses a chat-completions body.
pub fn parse_request(body: &[u8]) -> Result<(TurnRequest, OpenAiOptions)> {
    let req: ChatCompletionRequest = serde_json::from_slice(body)
        .map_err(|e| GatewayError::invalid(format!("chat completions body: {e}")))?;
    let extra = &req.extra;
    if let Some(n) = extra.get("n").filter(|v| !v.is_null()) {
        if n.as_u64() != Some(1) {
            return Err(GatewayError::invalid("only `n` = 1 is supported"));
        }
    }
    let stream = flag(extra, "stream")?;
    let include_usage = match extra.get("stream_options") {
        Some(Value::Object(o)) => o.get("include_usage").and_then(Value::as_bool) == Some(true),
        _ => false,
    };
    let mut sampling = SamplingParams::default();
    if let Some(t) = req.temperature {
        check_range("temperature", t, 0.0, 2.0)?;
        sampling.temperature = t;
    }
    if let Some(p) = req.top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(GatewayError::invalid(format!(
                "`top_p` must be in (0, 1], got {p}"
            )));
        }
        sampling.top_p = p;
    }
    if let Some(k) = extra.get("top_k").filter(|v| !v.is_null()) {
        let k = k
            .as_i64()
            .ok_or_else(|| GatewayError::invalid("`top_k` must be an integer"))?;
        sampling.top_k = (k > 0).then_some(k as u32);
    }
    sampling.seed = req.seed;
    let max_tokens = match req.max_completion_tokens.or(req.max_tokens) {
        Some(0) => return Err(GatewayError::invalid("`max_tokens` must be at least 1")),
        other => other.map(|n| n as usize),
    };
    let stop = match req.stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(GatewayError::invalid(format!(
                    "`stop` entries must be strings, got {other}"
                ))),
            })
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(GatewayError::invalid(format!(
                "`stop` must be a string or a list of strings, got {other}"
            )))
        }
    };
    let tool_choice = parse_tool_choice(req.tool_choice.as_ref())?;
    let turn = TurnRequest {
        messages: req.messages,
        tools: req.tools,
        tool_choice,
        sampling,
        max_tokens,
        stop,
    };
    let options = OpenAiOptions {
        stream,
        logprobs: req.logprobs == Some(true),
        include_usage,
    };
    Ok((turn, options))
}

fn flag(extra: &Map<String, Value>, key: &str) -> Result<bool> {
    match extra.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(GatewayError::invalid(format!(
            "`{key}` must be a boolean, got {other}"
        ))),
    }
}

/// `temperature` (0 to `max_temperature`) and `top_p` (0 < p ≤ 1) of a JSON request body, as
/// the Anthropic and Responses routes read them (absent or `null`: the defaults).
pub(crate) fn temperature_and_top_p(
    obj: &Map<String, Value>,
    max_temperature: f64,
) -> Result<SamplingParams> {
    let mut sampling = SamplingParams::default();
    if let Some(t) = obj.get("temperature").filter(|v| !v.is_null()) {
        let t = t
            .as_f64()
            .ok_or_else(|| GatewayError::invalid("`temperature` must be a number"))?;
        check_range("temperature", t, 0.0, max_temperature)?;
        sampling.temperature = t;
    }
    if let Some(p) = obj.get("top_p").filter(|v| !v.is_null()) {
        let p = p
            .as_f64()
            .ok_or_else(|| GatewayError::invalid("`top_p` must be a number"))?;
        if !(p > 0.0 && p <= 1.0) {
            return Err(GatewayError::invalid(format!(
                "`top_p` must be in (0, 1], got {p}"
            )));
        }
        sampling.top_p = p;
    }
    Ok(sampling)
}

pub(crate) fn check_range(name: &str, v: f64, lo: f64, hi: f64) -> Result<()> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(GatewayError::invalid(format!(
            "`{name}` must be in [{lo}, {hi}], got {v}"
        )))
    }
}

fn parse_tool_choice(v: Option<&Value>) -> Result<ToolChoice> {
    match v {
        None | Some(Value::Null) => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(GatewayError::invalid(format!(
                "`tool_choice` must be auto, none, required or a function, got `{other}`"
            ))),
        },
        Some(obj) => obj
            .pointer("/function/name")
            .and_then(Value::as_str)
            .map(|n| ToolChoice::Function(n.to_owned()))
            .ok_or_else(|| {
                GatewayError::invalid(format!(
                    "`tool_choice` object needs function.name, got {obj}"
                ))
            }),
    }
}

fn finish_reason(f: &Finish) -> &'static str {
    match f {
        Finish::Stop | Finish::StopSequence(_) => "stop",
        Finish::ToolCalls => "tool_calls",
        Finish::Length => "length",
    }
}

fn logprobs_value(answer: &TurnAnswer) -> Value {
    match &answer.logprobs {
        Some(lps) => {
            let content: Vec<Value> = answer
                .token_texts
                .iter()
                .zip(lps)
                .map(|(t, lp)| {
                    json!({"token": t, "logprob": lp, "bytes": t.as_bytes(), "top_logprobs": []})
                })
                .collect();
            json!({"content": content})
        }
        // The generator gave none: say so rather than invent zeros.
        None => Value::Null,
    }
}

fn usage(answer: &TurnAnswer) -> Value {
    let completion = answer.token_ids.len();
    json!({"prompt_tokens": answer.prompt_tokens, "completion_tokens": completion,
           "total_tokens": answer.prompt_tokens + completion})
}

fn extension(answer: &TurnAnswer) -> Value {
    json!({"chain": answer.chain, "format_error": answer.format_error})
}

/// The non-streaming response body.
pub fn response(answer: &TurnAnswer, id: &str, model: &str, created: u64, logprobs: bool) -> Value {
    let message = serde_json::to_value(&answer.message).unwrap_or(Value::Null);
    json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(&answer.finish),
                     "logprobs": if logprobs { logprobs_value(answer) } else { Value::Null }}],
        "usage": usage(answer),
        "uniagent": extension(answer),
    })
}

/// The `data:` payloads of a streamed response, `[DONE]` last.
pub fn chunks(
    answer: &TurnAnswer,
    id: &str,
    model: &str,
    created: u64,
    options: &OpenAiOptions,
) -> Vec<String> {
    let chunk = |delta: Value, finish: Value, logprobs: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]})
        .to_string()
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        Value::Null,
    )];
    let content = answer.message.content.clone().unwrap_or_default();
    let logprobs = if options.logprobs {
        logprobs_value(answer)
    } else {
        Value::Null
    };
    if !content.is_empty() || !logprobs.is_null() {
        out.push(chunk(json!({"content": content}), Value::Null, logprobs));
    }
    if let Some(reasoning) = &answer.message.reasoning_content {
        out.push(chunk(
            json!({"reasoning_content": reasoning}),
            Value::Null,
            Value::Null,
        ));
    }
    for (i, call) in answer.message.tool_calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments_wire()}}]}),
            Value::Null,
            Value::Null,
        ));
    }
    out.push(chunk(
        json!({}),
        finish_reason(&answer.finish).into(),
        Value::Null,
    ));
    if options.include_usage {
        out.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": usage(answer), "uniagent": extension(answer)})
            .to_string(),
        );
    }
    out.push("[DONE]".into());
    out
}

/// An error body in OpenAI's shape.
pub fn error_body(e: &GatewayError) -> Value {
    error_object(&e.to_string(), e.code())
}

/// OpenAI's error object: `{"error": {"message", "type", "code", "param": null}}`, the type
/// being the code.
pub fn error_object(message: &str, code: &str) -> Value {
    json!({"error": {"message": message, "type": code, "code": code, "param": null}})
}

/// `GET /v1/models`.
pub fn models(model: &str, created: u64) -> Value {
    json!({"object": "list", "data": [{"id": model, "object": "model", "created": created,
                                       "owned_by": "uniagent"}]})
}
