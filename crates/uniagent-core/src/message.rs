//! Chat messages and tool specifications, serde-compatible with the OpenAI chat-completions
//! format.
//!
//! Two wire details matter and are handled here once:
//! - A tool call's `arguments` is a JSON **string** on the wire and parsed JSON in memory.
//!   Arguments that are not a JSON object (a model can emit anything) are kept verbatim as
//!   [`serde_json::Value::String`] holding the raw text, so nothing is lost and the loop can
//!   report a format error the model sees; see [`FunctionCall::arguments_object`].
//! - `content` may be `null`, absent, a string, or a list of `{"type": "text"}` parts (joined).
//!
//! Fields this crate does not model are kept in `extra` and written back unchanged.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// OpenAI's newer name for system-level instructions.
    Developer,
    /// The task giver.
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering one tool call.
    Tool,
}

impl Role {
    /// The role as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Developer => "developer",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// One chat message.
///
/// ```
/// use uniagent_core::{Message, Role, ToolCall};
/// use serde_json::json;
///
/// let wire = json!({
///     "role": "assistant",
///     "content": null,
///     "tool_calls": [{"id": "call_1", "type": "function",
///                     "function": {"name": "execute_bash", "arguments": "{\"command\": \"ls\"}"}}]
/// });
/// let msg: Message = serde_json::from_value(wire.clone()).unwrap();
/// assert_eq!(msg.role, Role::Assistant);
/// assert_eq!(msg.tool_calls[0].function.arguments["command"], "ls");
/// // Arguments go back out as a JSON string.
/// assert_eq!(serde_json::to_value(&msg).unwrap(), wire);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Text content; `None` is written as `null` (e.g. an assistant turn with only tool calls).
    #[serde(default, deserialize_with = "deserialize_content")]
    pub content: Option<String>,
    /// Reasoning ("thinking") text, as vLLM, SGLang and DeepSeek return it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls made in an assistant turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `role: tool`: the id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Optional author name (for `tool`, some templates use the tool's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields not modelled here, kept as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    fn with_role(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            extra: Map::new(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::with_role(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::with_role(Role::User, content)
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::with_role(Role::Assistant, content)
    }

    /// An assistant message with tool calls and optional text.
    pub fn assistant_with_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            content,
            tool_calls,
            ..Self::with_role(Role::Assistant, "")
        }
    }

    /// A tool result answering the call with id `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::with_role(Role::Tool, content)
        }
    }

    /// The text content, or `""` when it is `null`.
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

fn deserialize_content<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(serde::de::Error::custom(format!(
                            "unsupported content part {part}: only {{\"type\": \"text\"}} parts are supported"
                        )))
                    }
                }
            }
            Ok(Some(text))
        }
        Some(other) => Err(serde::de::Error::custom(format!(
            "`content` must be a string, null or a list of text parts, got {other}"
        ))),
    }
}

/// A tool call inside an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id, echoed by the tool result's `tool_call_id`. Text parsers assign `call_<n>`.
    #[serde(default)]
    pub id: String,
    /// Always `"function"` today.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// Which function, with which arguments.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

impl ToolCall {
    /// A function call with parsed arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall::new(name, arguments),
        }
    }
}

/// The function part of a [`ToolCall`].
///
/// The wire text of `arguments` is remembered, so a message read from JSON is written back byte
/// for byte (spacing, key order, escapes), as long as `arguments` was not changed in between.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "WireFunctionCall", into = "WireFunctionCall")]
pub struct FunctionCall {
    /// Function (tool) name.
    pub name: String,
    /// Parsed arguments. On the wire: a JSON string. A wire string that is not a JSON object is
    /// kept verbatim as `Value::String(raw)` and written back unchanged.
    pub arguments: Value,
    /// The wire text `arguments` was parsed from, if any.
    wire: Option<String>,
}

impl PartialEq for FunctionCall {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.arguments == other.arguments
    }
}

impl FunctionCall {
    /// A call with parsed arguments.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            name: name.into(),
            arguments,
            wire: None,
        }
    }

    /// The arguments as a JSON object, or a message the model can be shown when they are not one.
    pub fn arguments_object(&self) -> Result<&Map<String, Value>, String> {
        match &self.arguments {
            Value::Object(map) => Ok(map),
            Value::String(raw) => Err(format!(
                "the arguments of `{}` are not a JSON object: {raw}",
                self.name
            )),
            other => Err(format!(
                "the arguments of `{}` are not a JSON object: {other}",
                self.name
            )),
        }
    }

    /// The arguments as written on the wire: the original text when it still matches, otherwise
    /// compact JSON (raw text for arguments that never parsed).
    pub fn arguments_wire(&self) -> String {
        if let Some(wire) = &self.wire {
            let still_matches = match &self.arguments {
                Value::String(raw) => raw == wire,
                parsed => serde_json::from_str::<Value>(wire).is_ok_and(|v| &v == parsed),
            };
            if still_matches {
                return wire.clone();
            }
        }
        match &self.arguments {
            // Raw text that did not parse as an object is written back exactly as received.
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct WireFunctionCall {
    name: String,
    #[serde(
        serialize_with = "serialize_arguments",
        deserialize_with = "deserialize_arguments"
    )]
    arguments: (Value, Option<String>),
}

impl From<WireFunctionCall> for FunctionCall {
    fn from(w: WireFunctionCall) -> Self {
        Self {
            name: w.name,
            arguments: w.arguments.0,
            wire: w.arguments.1,
        }
    }
}

impl From<FunctionCall> for WireFunctionCall {
    fn from(f: FunctionCall) -> Self {
        let wire = f.arguments_wire();
        Self {
            name: f.name,
            arguments: (Value::String(wire), None),
        }
    }
}

fn serialize_arguments<S: serde::Serializer>(
    v: &(Value, Option<String>),
    s: S,
) -> Result<S::Ok, S::Error> {
    v.0.serialize(s)
}

fn deserialize_arguments<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<(Value, Option<String>), D::Error> {
    match Value::deserialize(d)? {
        Value::String(raw) => match serde_json::from_str::<Value>(&raw) {
            Ok(v @ Value::Object(_)) => Ok((v, Some(raw))),
            _ => Ok((Value::String(raw.clone()), Some(raw))),
        },
        // Some servers and templates pass arguments already parsed.
        v @ Value::Object(_) => Ok((v, None)),
        Value::Null => Ok((Value::Object(Map::new()), None)),
        other => Err(serde::de::Error::custom(format!(
            "tool call `arguments` must be a JSON string or object, got {other}"
        ))),
    }
}

/// A tool the model may call, in OpenAI function format.
///
/// ```
/// use uniagent_core::ToolSpec;
/// use serde_json::json;
///
/// let spec = ToolSpec::function(
///     "finish",
///     "End the task and report the answer.",
///     json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}),
/// );
/// let wire = serde_json::to_value(&spec).unwrap();
/// assert_eq!(wire["type"], "function");
/// assert_eq!(wire["function"]["name"], "finish");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Always `"function"` today.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function's schema.
    pub function: FunctionSpec,
}

impl ToolSpec {
    /// A function tool.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self {
            kind: function_type(),
            function: FunctionSpec {
                name: name.into(),
                description: Some(description.into()),
                parameters,
                strict: None,
            },
        }
    }

    /// The function name.
    pub fn name(&self) -> &str {
        &self.function.name
    }
}

/// Name, description and JSON-Schema parameters of a function tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionSpec {
    /// Function name.
    pub name: String,
    /// What it does, written for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments object.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// OpenAI structured-outputs flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn invalid_argument_strings_survive_a_round_trip() {
        let wire = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1"}}]});
        let m: Message = serde_json::from_value(wire.clone()).unwrap();
        assert!(m.tool_calls[0].function.arguments_object().is_err());
        assert_eq!(serde_json::to_value(&m).unwrap(), wire);
    }

    #[test]
    fn content_parts_are_joined_and_images_rejected() {
        let m: Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}))
        .unwrap();
        assert_eq!(m.text(), "ab");
        let err = serde_json::from_value::<Message>(json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}))
        .unwrap_err();
        assert!(err.to_string().contains("only {\"type\": \"text\"}"));
    }

    #[test]
    fn absent_content_reads_as_null_and_unknown_fields_are_kept() {
        let m: Message = serde_json::from_value(
            json!({"role": "assistant", "refusal": null, "annotations": []}),
        )
        .unwrap();
        assert_eq!(m.content, None);
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(
            back,
            json!({"role": "assistant", "content": null, "refusal": null, "annotations": []})
        );
    }

    #[test]
    fn unknown_role_is_rejected() {
        assert!(
            serde_json::from_value::<Message>(json!({"role": "robot", "content": "x"})).is_err()
        );
    }
}
