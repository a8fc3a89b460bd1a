//! The typed format error of the tool-call parsers.

use serde::{Deserialize, Serialize};

/// What was wrong with a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolCallErrorKind {
    /// `<tool_call>` without `</tool_call>` (Hermes).
    Unclosed,
    /// The body is not valid JSON (Hermes).
    InvalidJson,
    /// The body or the arguments are not a JSON object (Hermes).
    NotAnObject,
    /// No function name (Hermes: no `name` string; XML: `<function=` without `>`).
    MissingName,
    /// The function is not among the declared tools.
    UnknownFunction,
    /// `<parameter=` without `>` (XML).
    MissingParameterName,
    /// A parameter the function's schema does not declare (XML).
    UnknownParameter,
    /// A parameter value that does not convert to its schema type (XML).
    InvalidValue,
}

/// A malformed tool call; [`ToolCallError::message`] is written to be shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolCallError {
    kind: ToolCallErrorKind,
    message: String,
}

impl ToolCallError {
    pub(crate) fn new(kind: ToolCallErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What was wrong.
    pub fn kind(&self) -> ToolCallErrorKind {
        self.kind
    }

    /// The explanation for the model.
    pub fn message(&self) -> &str {
        &self.message
    }
}
