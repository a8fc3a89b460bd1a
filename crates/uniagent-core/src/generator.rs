//! The [`TokenGenerator`] trait: token ids in, token ids and logprobs out.
//!
//! This is the training path's model interface: a vLLM/SGLang HTTP client, the tch engine in
//! `uniagent-train` or a scripted generator implement it, and a token-level
//! [`ChatModel`](crate::ChatModel) wraps one with a codec and a tool-call parser.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::model::FinishReason;
use crate::sampling::SamplingParams;

/// One generation request: a prompt as token ids and how to continue it.
///
/// ```
/// use uniagent_core::{GenerateRequest, SamplingParams};
/// let request = GenerateRequest::new(vec![9707, 1879], SamplingParams::greedy(), 16)
///     .with_stop_token_ids(vec![151645]);
/// assert_eq!(request.max_new_tokens, 16);
/// assert_eq!(request.stop_token_ids, vec![151645]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateRequest {
    /// The full context so far (prompt and earlier turns), as token ids.
    pub prompt_ids: Vec<u32>,
    /// Temperature, top-p, top-k and seed. `sampling.max_tokens` and `sampling.stop_token_ids`
    /// are not read: the fields below are authoritative.
    pub sampling: SamplingParams,
    /// Upper bound on the number of generated tokens.
    pub max_new_tokens: usize,
    /// Generation ends right after one of these ids is sampled (the id is included in the
    /// output).
    #[serde(default)]
    pub stop_token_ids: Vec<u32>,
    /// Identifies the trajectory, so that servers can route its turns to the same replica
    /// (prefix caching). Has no effect on the sampled tokens.
    #[serde(default)]
    pub session_id: Option<String>,
}

impl GenerateRequest {
    /// A request without stop ids or session.
    pub fn new(prompt_ids: Vec<u32>, sampling: SamplingParams, max_new_tokens: usize) -> Self {
        Self {
            prompt_ids,
            sampling,
            max_new_tokens,
            stop_token_ids: Vec::new(),
            session_id: None,
        }
    }

    /// Sets the stop token ids.
    pub fn with_stop_token_ids(mut self, stop_token_ids: Vec<u32>) -> Self {
        self.stop_token_ids = stop_token_ids;
        self
    }

    /// Sets the session id.
    pub fn with_session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }
}

/// What a [`TokenGenerator`] returns for one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateOutput {
    /// The sampled ids, stop id included when generation stopped on one.
    pub token_ids: Vec<u32>,
    /// One logprob per sampled id (same length as `token_ids`), as the backend reports it, or
    /// `None` when it reports none (a scripted demonstrator, a server asked without logprobs):
    /// never made-up values. For the tch engine and vLLM's default: the log-probability under
    /// the model's unmodified distribution (before temperature, top-p and top-k).
    pub logprobs: Option<Vec<f32>>,
    /// [`FinishReason::Stop`] on a stop id, [`FinishReason::Length`] when `max_new_tokens` (or
    /// the model's context) ran out, [`FinishReason::Abort`] when the backend aborted it.
    pub finish_reason: FinishReason,
    /// The version of the weights that produced the tokens, where the backend tracks it.
    pub weight_version: Option<u64>,
}

/// A token-level generator.
///
/// # Contract
/// - [`generate`](TokenGenerator::generate) continues `request.prompt_ids` with at most
///   `request.max_new_tokens` tokens and returns exactly one logprob per returned token.
/// - It stops right after sampling any id in `request.stop_token_ids` (that id is returned,
///   with [`FinishReason::Stop`]); otherwise it ends with [`FinishReason::Length`].
/// - `max_new_tokens == 0` returns an empty output with [`FinishReason::Length`].
/// - Temperature `0.0` is greedy decoding. With a seed, a backend that supports seeding gives
///   the same tokens for the same request and weights, whatever else it runs concurrently.
/// - An empty prompt, a prompt longer than the model's context or out-of-vocabulary ids are
///   [`Error::InvalidInput`](crate::Error::InvalidInput) /
///   [`Error::LengthLimit`](crate::Error::LengthLimit); backend failures are
///   [`Error::Model`](crate::Error::Model). Never a panic.
/// - Implementations are shared by many concurrent trajectories (`&self`); they may batch
///   concurrent calls together.
#[async_trait]
pub trait TokenGenerator: Send + Sync + Debug + 'static {
    /// Backend name for logs (`vllm`, `sglang`, `tch`, `scripted`).
    fn name(&self) -> &str;

    /// Generates a continuation of `request.prompt_ids`.
    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput>;
}

#[async_trait]
impl<T: TokenGenerator + ?Sized> TokenGenerator for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        (**self).generate(request).await
    }
}

#[async_trait]
impl<T: TokenGenerator + ?Sized> TokenGenerator for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        (**self).generate(request).await
    }
}
