//! Tool-call parsers: turn an assistant's text into [`ToolCall`]s.
//!
//! Two formats are supported, chosen with [`ToolCallFormat`]:
//! - [`ToolCallFormat::Hermes`] reads `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
//!   any number per turn (Qwen2.5, Qwen3).
//! - [`ToolCallFormat::Qwen3Coder`] reads `<tool_call><function=NAME><parameter=P>value</parameter>
//!   </function></tool_call>`, values typed by the tool's JSON schema.
//!
//! A malformed call is data, not a crash: the parsers return a [`ToolCallError`] whose message
//! is written for the model. No input makes them panic (fuzzed, see `fuzz/`).
//!
//! ```
//! use serde_json::json;
//! use uniagent_core::parsers::ToolCallFormat;
//! use uniagent_core::ToolSpec;
//!
//! let tools = [ToolSpec::function("bash", "Run a command.", json!({"type": "object",
//!     "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}}}))];
//! let text = "Listing.\n<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n\
//!             <parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>";
//! let parsed = ToolCallFormat::Qwen3Coder.parse(text, &tools).unwrap();
//! assert_eq!(parsed.content, "Listing.");
//! assert_eq!(parsed.calls[0].function.arguments, json!({"command": "ls", "timeout": 30}));
//!
//! let bad = ToolCallFormat::Hermes.parse("<tool_call>{\"name\": \"rm\"}</tool_call>", &tools);
//! assert!(bad.unwrap_err().message().contains("not defined"));
//! ```

mod error;
mod hermes;
mod qwen3_coder;

use serde::{Deserialize, Serialize};

pub use error::{ToolCallError, ToolCallErrorKind};
pub use hermes::parse_hermes;
pub use qwen3_coder::parse_qwen3_coder;

use crate::message::{ToolCall, ToolSpec};

/// The opening tag both formats use.
pub(crate) const TOOL_CALL_OPEN: &str = "<tool_call>";
/// The closing tag both formats use.
pub(crate) const TOOL_CALL_CLOSE: &str = "</tool_call>";

/// The calls found in a turn and the text around them.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedToolCalls {
    /// The text outside the tool-call blocks, trimmed (`""` if none).
    pub content: String,
    /// The calls in order, with ids `call_0`, `call_1`, ...
    pub calls: Vec<ToolCall>,
}

/// A tool-call text format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallFormat {
    /// JSON inside `<tool_call>` tags.
    Hermes,
    /// Qwen3-Coder XML (`<function=...><parameter=...>`).
    Qwen3Coder,
}

impl ToolCallFormat {
    /// Parses `text` against the declared `tools` (an empty list accepts any function name).
    pub fn parse(self, text: &str, tools: &[ToolSpec]) -> Result<ParsedToolCalls, ToolCallError> {
        match self {
            Self::Hermes => parse_hermes(text, tools),
            Self::Qwen3Coder => parse_qwen3_coder(text, tools),
        }
    }
}

/// Looks up a declared tool, or explains which ones exist.
pub(crate) fn find_tool<'a>(
    name: &str,
    tools: &'a [ToolSpec],
) -> Result<Option<&'a ToolSpec>, ToolCallError> {
    if tools.is_empty() {
        return Ok(None);
    }
    match tools.iter().find(|t| t.name() == name) {
        Some(t) => Ok(Some(t)),
        None => {
            let allowed: Vec<&str> = tools.iter().map(ToolSpec::name).collect();
            Err(ToolCallError::new(
                ToolCallErrorKind::UnknownFunction,
                format!(
                    "Invalid action: function '{name}' is not defined in the tools list.\nAllowed functions should be one of: {allowed:?}"
                ),
            ))
        }
    }
}

/// Joins the text pieces outside the call blocks.
pub(crate) fn remaining_text(pieces: &[&str]) -> String {
    pieces.concat().trim().to_owned()
}
