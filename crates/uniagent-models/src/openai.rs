//! [`OpenAiChatModel`]: an API-level [`ChatModel`] over OpenAI-compatible chat completions.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uniagent_core::openai::{ChatCompletionRequest, ChatCompletionResponse};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::{
    AssistantTurn, ChatModel, Error, FinishReason, Message, Result, Role, RolloutCache,
    SamplingParams, ToolSpec,
};

use super::http::{HttpClient, HttpModelConfig};

/// Settings of [`OpenAiChatModel`].
///
/// ```
/// use uniagent_models::OpenAiConfig;
/// let cfg: OpenAiConfig = serde_json::from_str(r#"{
///     "http": {"endpoints": ["https://api.openai.com/v1"], "model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"},
///     "text_tool_parser": "hermes"
/// }"#).unwrap();
/// assert!(cfg.extra_body.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    /// Endpoints (API roots including `/v1`), model, timeout, retries, API key variable.
    pub http: HttpModelConfig,
    /// When the server returns no structured `tool_calls`, parse calls from the text in this
    /// format (for servers started without a tool parser). `None`: text is just text.
    #[serde(default)]
    pub text_tool_parser: Option<ToolCallFormat>,
    /// Extra top-level request fields (`chat_template_kwargs`, `repetition_penalty`, ...).
    #[serde(default)]
    pub extra_body: Map<String, Value>,
}

/// A message-level chat model for evaluation against API models: messages and tools in, an
/// assistant message out. Inference only: the rollout cache holds messages, no tokens.
///
/// Tool calls come from the response's `tool_calls`, or, when it has none and
/// [`OpenAiConfig::text_tool_parser`] is set, are parsed from the text; a malformed call
/// becomes the turn's format error (the model is shown it), never an `Err`. Every request of
/// a trajectory goes to the same endpoint (sticky by trajectory id).
#[derive(Debug)]
pub struct OpenAiChatModel {
    http: HttpClient,
    model: String,
    text_tool_parser: Option<ToolCallFormat>,
    extra_body: Map<String, Value>,
}

impl OpenAiChatModel {
    /// A model over the endpoints of `config`.
    pub fn new(config: &OpenAiConfig) -> Result<Self> {
        Ok(Self {
            http: HttpClient::new(&config.http, "openai")?,
            model: config.http.model.clone(),
            text_tool_parser: config.text_tool_parser,
            extra_body: config.extra_body.clone(),
        })
    }

    /// The request body for a conversation (public for inspection and tests).
    pub fn request_body(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        s: &SamplingParams,
    ) -> ChatCompletionRequest {
        let mut extra = self.extra_body.clone();
        if let Some(k) = s.top_k {
            extra.insert("top_k".into(), k.into());
        }
        if !s.stop_token_ids.is_empty() {
            extra.insert("stop_token_ids".into(), s.stop_token_ids.clone().into());
        }
        ChatCompletionRequest {
            model: self.model.clone(),
            messages: messages.to_vec(),
            tools: tools.to_vec(),
            tool_choice: None,
            temperature: Some(s.temperature),
            top_p: Some(s.top_p),
            max_tokens: None,
            max_completion_tokens: s.max_tokens,
            stop: (!s.stop.is_empty()).then(|| s.stop.clone().into()),
            seed: s.seed,
            logprobs: None,
            extra,
        }
    }
}

fn finish_reason(v: Option<&str>) -> FinishReason {
    match v {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("abort") => FinishReason::Abort,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Other("none".into()),
    }
}

#[async_trait]
impl ChatModel for OpenAiChatModel {
    fn name(&self) -> &str {
        "openai"
    }

    async fn query(
        &self,
        cache: &mut RolloutCache,
        sampling: &SamplingParams,
    ) -> Result<AssistantTurn> {
        sampling.validate()?;
        let request = self.request_body(cache.messages(), cache.tools(), sampling);
        let body = serde_json::to_value(&request)
            .map_err(|e| Error::internal(format!("openai request: {e}")))?;
        let raw = self
            .http
            .post_json("/chat/completions", &body, Some(cache.id()))
            .await?;
        let response: ChatCompletionResponse =
            serde_json::from_value(raw).map_err(|e| Error::Protocol {
                message: format!("openai: unexpected response shape: {e}"),
            })?;
        let choice = response
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| Error::Protocol {
                message: "openai: response has no choices".into(),
            })?;
        let mut message = choice.message;
        if message.role != Role::Assistant {
            return Err(Error::Protocol {
                message: format!("openai: choice has role `{}`", message.role.as_str()),
            });
        }
        let mut format_error = None;
        if let (true, Some(format)) = (message.tool_calls.is_empty(), self.text_tool_parser) {
            match format.parse(message.text(), cache.tools()) {
                Ok(parsed) => {
                    // Call ids must be unique within the trajectory for tool messages to match.
                    let turn = cache.assistant_turns();
                    message.tool_calls = parsed
                        .calls
                        .into_iter()
                        .enumerate()
                        .map(|(i, mut c)| {
                            c.id = format!("call_{turn}_{i}");
                            c
                        })
                        .collect();
                }
                Err(e) => format_error = Some(e.message().to_owned()),
            }
        }
        let sampled_tokens = response.usage.map_or(0, |u| u.completion_tokens as usize);
        cache.push_message(message.clone());
        Ok(AssistantTurn {
            message,
            finish_reason: finish_reason(choice.finish_reason.as_deref()),
            format_error,
            sampled_tokens,
        })
    }
}
