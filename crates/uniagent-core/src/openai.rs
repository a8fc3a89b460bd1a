//! Request and response bodies of the OpenAI chat-completions API.
//!
//! Used by the API-level model backend and by tests that check our messages against the wire
//! format. Fields this crate does not model are kept in `extra` maps, so a body read and written
//! again loses nothing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{Message, ToolSpec};

/// `POST /v1/chat/completions` request body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    /// Model name.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// `"auto"`, `"none"`, `"required"` or a specific function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Maximum new tokens (legacy name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Maximum new tokens (current name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// Stop strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Value>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Whether to return log-probabilities of the sampled tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// Other fields (vendor extensions such as `top_k`, `chat_template_kwargs`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `POST /v1/chat/completions` response body (non-streaming).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    /// Response id.
    #[serde(default)]
    pub id: String,
    /// `"chat.completion"`.
    #[serde(default)]
    pub object: String,
    /// Unix time.
    #[serde(default)]
    pub created: u64,
    /// Model that answered.
    #[serde(default)]
    pub model: String,
    /// One entry per requested completion.
    pub choices: Vec<Choice>,
    /// Token counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Other fields (e.g. `system_fingerprint`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One completion in a [`ChatCompletionResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// Position in `choices`.
    #[serde(default)]
    pub index: u32,
    /// The assistant message.
    pub message: Message,
    /// `stop`, `length`, `tool_calls`, ...
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Per-token log-probabilities, when requested (`null` otherwise, as OpenAI writes it).
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Other fields (e.g. vLLM's `stop_reason`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Token counts of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub completion_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
}
