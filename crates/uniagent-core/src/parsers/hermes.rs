//! The Hermes format: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

use serde_json::{Map, Value};

use super::{
    find_tool, remaining_text, ParsedToolCalls, ToolCallError, ToolCallErrorKind, TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
};
use crate::message::{ToolCall, ToolSpec};

const HINT: &str =
    "Expected format:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

fn error(kind: ToolCallErrorKind, what: String) -> ToolCallError {
    ToolCallError::new(kind, format!("{what} {HINT}"))
}

/// Parses every `<tool_call>...</tool_call>` block of `text` as Hermes JSON.
///
/// No `<tool_call>` at all: no calls. An opening tag with no closing tag anywhere, a body that is
/// not a JSON object with a string `name`, an undeclared function (when `tools` is not empty) or
/// arguments that are not an object are format errors. `arguments` may be absent or `null`
/// (empty object) or a JSON string holding an object (decoded once more).
pub fn parse_hermes(text: &str, tools: &[ToolSpec]) -> Result<ParsedToolCalls, ToolCallError> {
    if !text.contains(TOOL_CALL_OPEN) {
        return Ok(ParsedToolCalls {
            content: text.trim().to_owned(),
            calls: Vec::new(),
        });
    }
    if !text.contains(TOOL_CALL_CLOSE) {
        return Err(error(
            ToolCallErrorKind::Unclosed,
            "Unclosed tool call: missing </tool_call>.".into(),
        ));
    }
    let mut outside: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(TOOL_CALL_OPEN) {
        let after_open = &rest[open + TOOL_CALL_OPEN.len()..];
        let Some(close) = after_open.find(TOOL_CALL_CLOSE) else {
            break;
        };
        outside.push(&rest[..open]);
        let body = after_open[..close].trim();
        rest = &after_open[close + TOOL_CALL_CLOSE.len()..];
        if body.is_empty() {
            continue;
        }
        calls.push(parse_body(body, tools, calls.len())?);
    }
    outside.push(rest);
    Ok(ParsedToolCalls {
        content: remaining_text(&outside),
        calls,
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn parse_body(body: &str, tools: &[ToolSpec], index: usize) -> Result<ToolCall, ToolCallError> {
    let value: Value = serde_json::from_str(body).map_err(|e| {
        error(
            ToolCallErrorKind::InvalidJson,
            format!("Invalid tool_call JSON: {e}."),
        )
    })?;
    let Value::Object(mut obj) = value else {
        return Err(error(
            ToolCallErrorKind::NotAnObject,
            format!(
                "Invalid tool_call: expected a JSON object, got {}.",
                json_kind(&value)
            ),
        ));
    };
    let name = match obj.remove("name") {
        Some(Value::String(name)) => name,
        _ => {
            return Err(error(
                ToolCallErrorKind::MissingName,
                "Invalid tool_call: missing 'name' field.".into(),
            ))
        }
    };
    find_tool(&name, tools)?;
    let arguments = match obj.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(raw)) => match serde_json::from_str::<Value>(&raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return Err(error(
                    ToolCallErrorKind::NotAnObject,
                    format!("Invalid tool_call: 'arguments' of '{name}' must be a JSON object, got a string."),
                ))
            }
        },
        Some(v @ Value::Object(_)) => v,
        Some(other) => {
            return Err(error(
                ToolCallErrorKind::NotAnObject,
                format!("Invalid tool_call: 'arguments' of '{name}' must be a JSON object, got {}.", json_kind(&other)),
            ))
        }
    };
    Ok(ToolCall::new(format!("call_{index}"), name, arguments))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec::function(
                "bash",
                "",
                json!({"type": "object", "properties": {"command": {"type": "string"}}}),
            ),
            ToolSpec::function("finish", "", json!({"type": "object", "properties": {}})),
        ]
    }

    #[test]
    fn several_calls_and_the_text_around_them() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>\n\
                    <tool_call>{\"name\": \"finish\", \"arguments\": \"{}\"}</tool_call>";
        let p = parse_hermes(text, &tools()).unwrap();
        assert_eq!(p.content, "Let me look.");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0].id, "call_0");
        assert_eq!(p.calls[0].function.arguments, json!({"command": "ls"}));
        assert_eq!(p.calls[1].function.name, "finish");
        assert_eq!(p.calls[1].function.arguments, json!({}));
    }

    #[test]
    fn errors_are_typed_and_explain_the_format() {
        for (text, kind) in [
            (
                "<tool_call>{\"name\": \"bash\"",
                ToolCallErrorKind::Unclosed,
            ),
            (
                "<tool_call>{\"name\": bash}</tool_call>",
                ToolCallErrorKind::InvalidJson,
            ),
            ("<tool_call>[1]</tool_call>", ToolCallErrorKind::NotAnObject),
            (
                "<tool_call>{\"arguments\": {}}</tool_call>",
                ToolCallErrorKind::MissingName,
            ),
            (
                "<tool_call>{\"name\": \"rm\"}</tool_call>",
                ToolCallErrorKind::UnknownFunction,
            ),
            (
                "<tool_call>{\"name\": \"bash\", \"arguments\": [1]}</tool_call>",
                ToolCallErrorKind::NotAnObject,
            ),
            (
                "<tool_call>{\"name\": \"bash\", \"arguments\": \"x\"}</tool_call>",
                ToolCallErrorKind::NotAnObject,
            ),
        ] {
            let err = parse_hermes(text, &tools()).unwrap_err();
            assert_eq!(err.kind(), kind, "{text}");
            if kind != ToolCallErrorKind::UnknownFunction {
                assert!(err.message().ends_with(HINT), "{text}: {}", err.message());
            }
        }
    }

    #[test]
    fn no_tags_or_blank_blocks_mean_no_calls() {
        assert!(parse_hermes("just text", &tools())
            .unwrap()
            .calls
            .is_empty());
        let p = parse_hermes("a <tool_call>  </tool_call> b", &tools()).unwrap();
        assert!(p.calls.is_empty());
        assert_eq!(p.content, "a  b");
    }
}
