#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]
// Without a backend feature only the shared parts (client, pool, config) are built.
#![cfg_attr(
    not(any(
        feature = "openai",
        feature = "vllm",
        feature = "sglang",
        feature = "verl-bridge"
    )),
    allow(dead_code, unused_imports, unused_macros)
)]

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
