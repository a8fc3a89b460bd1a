//! The [`ChatModel`] trait: what the interaction loop talks to.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::message::{Message, Role, ToolSpec};
use crate::rollout::RolloutCache;
use crate::sampling::SamplingParams;

/// What a model backend provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelCapabilities {
    /// The backend fills the cache's token trace (prompt/response ids, mask, logprobs): usable
    /// for training.
    pub token_level: bool,
    /// Sampled tokens come with log-probabilities.
    pub logprobs: bool,
}

impl ModelCapabilities {
    /// A token-level backend with logprobs (the training path).
    pub const fn token_level() -> Self {
        Self {
            token_level: true,
            logprobs: true,
        }
    }

    /// A message-level (API) backend without token data.
    pub const fn api() -> Self {
        Self {
            token_level: false,
            logprobs: false,
        }
    }
}

/// Why generation of a turn stopped.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-turn token or stop string.
    Stop,
    /// The token budget of the turn ran out.
    Length,
    /// The API reported tool calls.
    ToolCalls,
    /// The server aborted the request (e.g. for a weight update).
    Abort,
    /// Anything else the backend reported.
    Other(String),
}

/// One assistant turn produced by [`ChatModel::query`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantTurn {
    /// The assistant message (text, reasoning, tool calls), already appended to the cache.
    pub message: Message,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// When the text held a malformed tool call: a message the model can be shown. The
    /// malformed text stays in `message.content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_error: Option<String>,
    /// Tokens sampled in this turn (0 when unknown).
    pub sampled_tokens: usize,
}

/// A chat model as the interaction loop sees it.
///
/// # Contract
/// - [`start`](ChatModel::start) builds the cache for a new trajectory from the prompt messages
///   and tools; token-level backends render and tokenize the prompt and fail with
///   [`Error::LengthLimit`](crate::Error::LengthLimit) when it exceeds the prompt limit (never
///   truncating it).
/// - [`query`](ChatModel::query) samples one assistant turn, appends the message to the cache
///   and, for token-level backends, the sampled ids with mask 1 and their logprobs. Before
///   calling the model it checks the length limits and fails with
///   [`Error::LengthLimit`](crate::Error::LengthLimit) if no token can be generated.
/// - [`append`](ChatModel::append) adds non-assistant messages (tool results, user turns) with
///   mask 0, tokenized incrementally without rewriting any earlier token.
/// - Implementations are shared by many concurrent trajectories: per-trajectory state lives in
///   the [`RolloutCache`], never in the model.
/// - Transient backend failures are retried inside the backend; what reaches the caller as
///   [`Error::Model`](crate::Error::Model) ended the attempt.
///
/// An API-level model (messages in, a message out, no token ids) implements only
/// [`name`](ChatModel::name) and [`query`](ChatModel::query): the defaults keep the messages
/// (`RolloutCache::messages_only`) and say so in [`capabilities`](ChatModel::capabilities).
/// Token-level backends override all three.
#[async_trait]
pub trait ChatModel: Send + Sync + Debug + 'static {
    /// Backend name for logs (`vllm`, `sglang`, `openai`, `tch`, `scripted`).
    fn name(&self) -> &str;

    /// What this backend provides (default: an API-level model, [`ModelCapabilities::api`]).
    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities::api()
    }

    /// Creates the cache of a new trajectory (default: the messages and tools only).
    async fn start(
        &self,
        id: &str,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
    ) -> Result<RolloutCache> {
        Ok(RolloutCache::messages_only(id, messages, tools))
    }

    /// Samples the next assistant turn and appends it to the cache.
    async fn query(
        &self,
        cache: &mut RolloutCache,
        sampling: &SamplingParams,
    ) -> Result<AssistantTurn>;

    /// Appends tool results or user messages to the cache (default: the messages only; an
    /// assistant message is refused, it comes from [`query`](ChatModel::query)).
    async fn append(&self, cache: &mut RolloutCache, messages: Vec<Message>) -> Result<()> {
        if messages.iter().any(|m| m.role == Role::Assistant) {
            return Err(Error::invalid_input(
                "append takes non-assistant messages only",
            ));
        }
        messages.into_iter().for_each(|m| cache.push_message(m));
        Ok(())
    }

    /// The chat template's full render of `cache`'s messages when the token stream is not
    /// append-only (it differs from that render), for the trajectory record; `None` when the
    /// stream is the render, or the backend has no template (the default).
    fn rerender_ids(&self, cache: &RolloutCache) -> Result<Option<Vec<u32>>> {
        let _ = cache;
        Ok(None)
    }
}

/// A model behind a smart pointer is a model: every method forwards to the pointee.
macro_rules! forward_chat_model {
    ($($pointer:ident),+) => {$(
        #[async_trait]
        impl<T: ChatModel + ?Sized> ChatModel for $pointer<T> {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn capabilities(&self) -> ModelCapabilities {
                (**self).capabilities()
            }
            async fn start(
                &self,
                id: &str,
                messages: Vec<Message>,
                tools: Vec<ToolSpec>,
            ) -> Result<RolloutCache> {
                (**self).start(id, messages, tools).await
            }
            async fn query(
                &self,
                cache: &mut RolloutCache,
                sampling: &SamplingParams,
            ) -> Result<AssistantTurn> {
                (**self).query(cache, sampling).await
            }
            async fn append(&self, cache: &mut RolloutCache, messages: Vec<Message>) -> Result<()> {
                (**self).append(cache, messages).await
            }
            fn rerender_ids(&self, cache: &RolloutCache) -> Result<Option<Vec<u32>>> {
                (**self).rerender_ids(cache)
            }
        }
    )+};
}

forward_chat_model!(Arc, Box);
