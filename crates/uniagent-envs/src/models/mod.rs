//! HTTP model backends (features `openai`, `vllm`, `sglang`). They live here, not in
//! `uniagent-core`, so that core stays free of an HTTP client (see
//! `docs/decisions/0002-model-backends-location.md`).
//!
//! - [`VllmGenerator`] and [`SglangGenerator`]: token-level [`TokenGenerator`]s for the
//!   training path (wrap them in a token-level chat model with a codec);
//! - [`VerlBridgeGenerator`]: a token-level generator over verl's own LLM client, through the
//!   generation bridge of the `uniagent-verl` Python package (`uniagent serve`);
//! - [`OpenAiChatModel`]: an API-level [`ChatModel`] for evaluation;
//! - all three share [`EndpointPool`] (several servers, least outstanding requests, sticky per
//!   trajectory) and [`HttpModelConfig`] (timeouts, retries with backoff on retryable errors
//!   only, API key from the environment).
//!
//! [`TokenGenerator`]: uniagent_core::TokenGenerator
//! [`ChatModel`]: uniagent_core::ChatModel

mod http;
#[cfg(feature = "openai")]
mod openai;
#[cfg(all(test, any(feature = "vllm", feature = "sglang")))]
mod parser_properties;
mod pool;
#[cfg(feature = "sglang")]
mod sglang;
#[cfg(feature = "verl-bridge")]
mod verl_bridge;
#[cfg(feature = "vllm")]
mod vllm;

pub use http::HttpModelConfig;
#[cfg(feature = "openai")]
pub use openai::{OpenAiChatModel, OpenAiConfig};
pub use pool::{EndpointPool, Lease};
#[cfg(feature = "sglang")]
pub use sglang::{parse_generate, SglangGenerator};
#[cfg(feature = "verl-bridge")]
pub use verl_bridge::{parse_bridge_answer, VerlBridgeGenerator};
#[cfg(feature = "vllm")]
pub use vllm::{parse_completion, VllmGenerator};
