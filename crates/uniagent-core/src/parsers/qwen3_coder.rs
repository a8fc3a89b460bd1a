//! The Qwen3-Coder XML format, values typed by the tool's JSON schema:
//!
//! ```text
//! <tool_call>
//! <function=str_replace_editor>
//! <parameter=command>
//! view
//! </parameter>
//! </function>
//! </tool_call>
//! ```

use serde_json::{Map, Number, Value};

use super::{
    find_tool, remaining_text, ParsedToolCalls, ToolCallError, ToolCallErrorKind, TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
};
use crate::message::{ToolCall, ToolSpec};

const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAMETER_OPEN: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "</parameter>";

/// Parses Qwen3-Coder XML tool calls.
///
/// Tolerant where the model commonly slips: an unterminated last `<tool_call>`, `<function=` or
/// `<parameter=` runs to the end of its enclosing block. One leading and one trailing newline of
/// each value are removed; the value `null` (any case) is JSON null. Values are converted by the
/// schema `type` of their parameter: strings stay raw, integers, numbers (integral floats become
/// integers), booleans (`true`/`false`, any case), objects and arrays (JSON). Errors: a missing
/// `>` after a function or parameter name, an undeclared function (when `tools` is not empty),
/// a parameter the schema does not declare (unless the function declares none), a value that
/// does not convert. Required parameters are not checked here.
pub fn parse_qwen3_coder(text: &str, tools: &[ToolSpec]) -> Result<ParsedToolCalls, ToolCallError> {
    let Some(first) = text.find(TOOL_CALL_OPEN) else {
        return Ok(ParsedToolCalls {
            content: text.trim().to_owned(),
            calls: Vec::new(),
        });
    };
    let mut outside = vec![&text[..first]];
    let mut calls = Vec::new();
    let mut rest = &text[first..];
    while let Some(open) = rest.find(TOOL_CALL_OPEN) {
        outside.push(&rest[..open]);
        let after = &rest[open + TOOL_CALL_OPEN.len()..];
        let (block, next) = match after.find(TOOL_CALL_CLOSE) {
            Some(close) => (&after[..close], &after[close + TOOL_CALL_CLOSE.len()..]),
            None => (after, ""),
        };
        rest = next;
        parse_block(block, tools, &mut calls)?;
    }
    outside.push(rest);
    if calls.is_empty() {
        return Ok(ParsedToolCalls {
            content: text.trim().to_owned(),
            calls,
        });
    }
    // The first piece was pushed twice (before the loop and as the loop's first prefix: empty).
    Ok(ParsedToolCalls {
        content: remaining_text(&outside),
        calls,
    })
}

fn parse_block(
    block: &str,
    tools: &[ToolSpec],
    calls: &mut Vec<ToolCall>,
) -> Result<(), ToolCallError> {
    let mut rest = block;
    while let Some(open) = rest.find(FUNCTION_OPEN) {
        let after = &rest[open + FUNCTION_OPEN.len()..];
        let (body, next) = match after.find(FUNCTION_CLOSE) {
            Some(close) => (&after[..close], &after[close + FUNCTION_CLOSE.len()..]),
            None => (after, ""),
        };
        rest = next;
        let Some((name, params)) = body.split_once('>') else {
            return Err(ToolCallError::new(
                ToolCallErrorKind::MissingName,
                "Invalid function call format: Cannot find function name.",
            ));
        };
        let name = name.trim();
        let spec = find_tool(name, tools)?;
        let arguments = parse_parameters(name, params, spec)?;
        calls.push(ToolCall::new(
            format!("call_{}", calls.len()),
            name,
            Value::Object(arguments),
        ));
    }
    Ok(())
}

fn parse_parameters(
    function: &str,
    body: &str,
    spec: Option<&ToolSpec>,
) -> Result<Map<String, Value>, ToolCallError> {
    let properties = spec
        .and_then(|s| s.function.parameters.get("properties"))
        .and_then(Value::as_object);
    let declares_none = properties.is_none_or(Map::is_empty);
    let mut args = Map::new();
    let mut rest = body;
    while let Some(open) = rest.find(PARAMETER_OPEN) {
        let after = &rest[open + PARAMETER_OPEN.len()..];
        let end = [after.find(PARAMETER_CLOSE), after.find(PARAMETER_OPEN)]
            .into_iter()
            .flatten()
            .min();
        let (param, next) = match end {
            Some(e) if after[e..].starts_with(PARAMETER_CLOSE) => {
                (&after[..e], &after[e + PARAMETER_CLOSE.len()..])
            }
            Some(e) => (&after[..e], &after[e..]),
            None => (after, ""),
        };
        rest = next;
        let Some((name, raw)) = param.split_once('>') else {
            return Err(ToolCallError::new(
                ToolCallErrorKind::MissingParameterName,
                format!("Invalid function call format: Cannot find parameter name in tool call '{function}'."),
            ));
        };
        let name = name.trim();
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        let schema = properties.and_then(|p| p.get(name));
        let value = match schema {
            _ if raw.eq_ignore_ascii_case("null") => Value::Null,
            Some(schema) => convert(function, name, raw, schema)?,
            None if spec.is_none() || declares_none => Value::String(raw.to_owned()),
            None => {
                let allowed: Vec<&String> =
                    properties.map(|p| p.keys().collect()).unwrap_or_default();
                return Err(ToolCallError::new(
                    ToolCallErrorKind::UnknownParameter,
                    format!(
                        "Invalid action: parameter '{name}' is not defined in the parameters for function '{function}'.\nAllowed parameters for function '{function}': {allowed:?}"
                    ),
                ));
            }
        };
        args.insert(name.to_owned(), value);
    }
    Ok(args)
}

/// The schema's type name, lower-cased; for a list of types the first that is not `null`.
fn schema_type(schema: &Value) -> String {
    match schema.get("type") {
        Some(Value::String(t)) => t.to_lowercase(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| !t.eq_ignore_ascii_case("null"))
            .unwrap_or("string")
            .to_lowercase(),
        _ if schema.get("enum").is_some() => "enum".to_owned(),
        _ => "string".to_owned(),
    }
}

fn invalid(function: &str, name: &str, raw: &str, what: &str) -> ToolCallError {
    ToolCallError::new(
        ToolCallErrorKind::InvalidValue,
        format!("Invalid action: parameter '{name}' value '{raw}' is not {what} in tool call '{function}'."),
    )
}

fn convert(function: &str, name: &str, raw: &str, schema: &Value) -> Result<Value, ToolCallError> {
    let ty = schema_type(schema);
    let t = ty.as_str();
    if matches!(t, "string" | "str" | "text" | "varchar" | "char" | "enum") {
        return Ok(Value::String(raw.to_owned()));
    }
    let trimmed = raw.trim();
    if ["int", "uint", "long", "short", "unsigned"]
        .iter()
        .any(|p| t.starts_with(p))
    {
        return trimmed
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| trimmed.parse::<u64>().map(Value::from))
            .map_err(|_| invalid(function, name, raw, "an integer"));
    }
    if t.starts_with("num") || t.starts_with("float") {
        let f = trimmed
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .ok_or_else(|| invalid(function, name, raw, "a float"))?;
        if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
            return Ok(Value::from(f as i64));
        }
        return Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| invalid(function, name, raw, "a float"));
    }
    if matches!(t, "boolean" | "bool" | "binary") {
        return match trimmed.to_lowercase().as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(invalid(
                function,
                name,
                raw,
                "a boolean (`true` or `false`)",
            )),
        };
    }
    let structured =
        matches!(t, "object" | "array" | "arr") || t.starts_with("dict") || t.starts_with("list");
    serde_json::from_str::<Value>(trimmed).map_err(|_| {
        invalid(
            function,
            name,
            raw,
            if structured { "valid JSON" } else { "valid" },
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec::function(
                "edit",
                "",
                json!({"type": "object", "properties": {
                    "command": {"type": "string"}, "line": {"type": "integer"}, "ratio": {"type": "number"},
                    "force": {"type": "boolean"}, "lines": {"type": "array"}, "opts": {"type": "object"},
                    "maybe": {"type": ["null", "integer"]}}}),
            ),
            ToolSpec::function("finish", "", json!({"type": "object", "properties": {}})),
        ]
    }

    #[test]
    fn values_follow_the_schema_types() {
        let text = "I will edit.\n<tool_call>\n<function=edit>\n<parameter=command>\n  keep spaces \n</parameter>\n\
                    <parameter=line>\n42\n</parameter>\n<parameter=ratio>\n2.0\n</parameter>\n<parameter=force>\nTRUE\n</parameter>\n\
                    <parameter=lines>\n[1, 2]\n</parameter>\n<parameter=opts>\n{\"a\": null}\n</parameter>\n\
                    <parameter=maybe>\nNull\n</parameter>\n</function>\n</tool_call>";
        let p = parse_qwen3_coder(text, &tools()).unwrap();
        assert_eq!(p.content, "I will edit.");
        assert_eq!(
            p.calls[0].function.arguments,
            json!({"command": "  keep spaces ", "line": 42, "ratio": 2, "force": true, "lines": [1, 2],
                   "opts": {"a": null}, "maybe": null})
        );
    }

    #[test]
    fn tolerates_missing_closing_tags_and_several_functions() {
        let text = "<tool_call><function=edit><parameter=command>a<parameter=line>3</function>\
                    <function=finish><parameter=anything>x</parameter></function></tool_call>\
                    <tool_call><function=finish>";
        let p = parse_qwen3_coder(text, &tools()).unwrap();
        assert_eq!(p.calls.len(), 3);
        assert_eq!(
            p.calls[0].function.arguments,
            json!({"command": "a", "line": 3})
        );
        assert_eq!(p.calls[1].function.arguments, json!({"anything": "x"}));
        assert_eq!(p.calls[2].id, "call_2");
    }

    #[test]
    fn errors_are_typed() {
        for (text, kind) in [
            ("<tool_call><function=edit", ToolCallErrorKind::MissingName),
            (
                "<tool_call><function=nope></function>",
                ToolCallErrorKind::UnknownFunction,
            ),
            (
                "<tool_call><function=edit><parameter=line</function>",
                ToolCallErrorKind::MissingParameterName,
            ),
            (
                "<tool_call><function=edit><parameter=zzz>1</parameter></function>",
                ToolCallErrorKind::UnknownParameter,
            ),
            (
                "<tool_call><function=edit><parameter=line>4.5</parameter></function>",
                ToolCallErrorKind::InvalidValue,
            ),
            (
                "<tool_call><function=edit><parameter=ratio>x</parameter></function>",
                ToolCallErrorKind::InvalidValue,
            ),
            (
                "<tool_call><function=edit><parameter=force>yes</parameter></function>",
                ToolCallErrorKind::InvalidValue,
            ),
            (
                "<tool_call><function=edit><parameter=lines>[1,</parameter></function>",
                ToolCallErrorKind::InvalidValue,
            ),
        ] {
            assert_eq!(
                parse_qwen3_coder(text, &tools()).unwrap_err().kind(),
                kind,
                "{text}"
            );
        }
    }

    #[test]
    fn blocks_without_functions_are_plain_text() {
        let p = parse_qwen3_coder("x <tool_call>garbage</tool_call>", &tools()).unwrap();
        assert!(p.calls.is_empty());
        assert_eq!(p.content, "x <tool_call>garbage</tool_call>");
    }
}
