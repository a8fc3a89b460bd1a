//! [`TokenChatModel`]: a [`TokenGenerator`] + [`Codec`] + tool-call parser as a [`ChatModel`] —
//! the training path, where the trajectory is the exact token stream the policy saw and
//! sampled.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::generator::{GenerateRequest, TokenGenerator};
use crate::message::{Message, ToolSpec};
use crate::model::{AssistantTurn, ChatModel, FinishReason, ModelCapabilities};
use crate::rollout::{LengthLimits, RolloutCache};
use crate::sampling::SamplingParams;

/// A token-level chat model. Each query sends the whole context (prompt and every earlier
/// token, exactly as kept in the cache) to the generator with the trajectory id as session
/// (sticky routing, prefix caching), a token budget from the cache's length limits (checked
/// before the call), and the codec's stop ids plus `sampling.stop_token_ids`. The sampled ids
/// are appended verbatim with their logprobs and weight version; the codec decodes and parses
/// them (a malformed tool call becomes the turn's format error). Observations are appended
/// incrementally by the codec with mask 0.
///
/// The codec's tool-call parser ([`Codec::with_tool_parser`]) decides the call format.
#[derive(Debug, Clone)]
pub struct TokenChatModel {
    generator: Arc<dyn TokenGenerator>,
    codec: Arc<Codec>,
    limits: LengthLimits,
    template_kwargs: Map<String, Value>,
}

impl TokenChatModel {
    /// A model sampling from `generator`, rendering and parsing with `codec`, under `limits`.
    pub fn new(
        generator: Arc<dyn TokenGenerator>,
        codec: Arc<Codec>,
        limits: LengthLimits,
    ) -> Self {
        Self {
            generator,
            codec,
            limits,
            template_kwargs: Map::new(),
        }
    }

    /// Extra chat-template variables for every trajectory (e.g. `enable_thinking`).
    pub fn with_template_kwargs(mut self, kwargs: Map<String, Value>) -> Self {
        self.template_kwargs = kwargs;
        self
    }

    /// The codec.
    pub fn codec(&self) -> &Codec {
        &self.codec
    }
}

#[async_trait]
impl ChatModel for TokenChatModel {
    fn name(&self) -> &str {
        self.generator.name()
    }

    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities::token_level()
    }

    async fn start(
        &self,
        id: &str,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
    ) -> Result<RolloutCache> {
        self.codec.start(
            id,
            messages,
            tools,
            self.template_kwargs.clone(),
            self.limits,
        )
    }

    async fn query(
        &self,
        cache: &mut RolloutCache,
        sampling: &SamplingParams,
    ) -> Result<AssistantTurn> {
        sampling.validate()?;
        let budget = cache.generation_budget(sampling.max_tokens.map(|t| t as usize))?;
        let trace = cache.tokens().ok_or_else(|| {
            Error::invalid_input(format!("rollout `{}` has no token trace", cache.id()))
        })?;
        let mut stop = self.codec.stop_token_ids().to_vec();
        stop.extend(
            sampling
                .stop_token_ids
                .iter()
                .filter(|id| !self.codec.stop_token_ids().contains(id)),
        );
        let request = GenerateRequest::new(trace.all_ids(), sampling.clone(), budget)
            .with_stop_token_ids(stop)
            .with_session_id(cache.id());
        let out = self.generator.generate(request).await?;
        if out.token_ids.len() > budget {
            return Err(Error::Model {
                backend: self.generator.name().to_owned(),
                message: format!(
                    "generated {} tokens with a budget of {budget}",
                    out.token_ids.len()
                ),
                retryable: false,
                source: None,
            });
        }
        // A backend without logprobs: placeholders in the cache, none in the trajectory.
        let placeholders;
        let logprobs = match &out.logprobs {
            Some(l) => l.as_slice(),
            None => {
                placeholders = vec![0.0; out.token_ids.len()];
                &placeholders
            }
        };
        let turn =
            self.codec
                .append_sampled(cache, &out.token_ids, logprobs, out.weight_version)?;
        if out.logprobs.is_none() {
            cache.mark_logprobs_missing();
        }
        let finish_reason = match (out.finish_reason, turn.stopped) {
            (FinishReason::Stop, false) => FinishReason::Length,
            (reason, _) => reason,
        };
        Ok(AssistantTurn {
            message: turn.message,
            finish_reason,
            format_error: turn.tool_call_error.map(|e| e.message().to_owned()),
            sampled_tokens: out.token_ids.len(),
        })
    }

    async fn append(&self, cache: &mut RolloutCache, messages: Vec<Message>) -> Result<()> {
        self.codec.append_messages(cache, &messages)
    }

    fn rerender_ids(&self, cache: &RolloutCache) -> Result<Option<Vec<u32>>> {
        self.codec.rerender_ids(cache)
    }
}
