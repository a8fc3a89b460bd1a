#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod agent;
pub mod cassette;
#[cfg(feature = "codec")]
pub mod codec;
pub mod config;
mod error;
pub mod formats;
mod generator;
pub mod layer;
mod message;
mod model;
pub mod openai;
pub mod parsers;
pub mod pyfmt;
mod retry;
mod reward;
pub mod rollout;
pub mod runner;
mod sampling;
pub mod sandbox;
mod task;
pub mod telemetry;
#[cfg(feature = "test-utils")]
pub mod testing;
mod tool;

pub use error::{
    error_chain, retryable_http_status, BoxError, Error, ErrorKind, LengthLimitKind, Result,
};
pub use generator::{GenerateOutput, GenerateRequest, TokenGenerator};
pub use message::{FunctionCall, FunctionSpec, Message, Role, ToolCall, ToolSpec};
pub use model::{AssistantTurn, ChatModel, FinishReason, ModelCapabilities};
pub use retry::{duration_secs, opt_duration_secs, RetryConfig};
pub use reward::{RewardContext, RewardOutcome, RewardSpec};
pub use rollout::{
    AgentLoopOutput, CacheCheckpoint, CacheDelta, LengthLimits, RolloutCache, TokenSource,
    TokenSourceRuns,
};
pub use sampling::SamplingParams;
pub use sandbox::{Capabilities, Deployment, DeploymentExt};
pub use task::{Task, TIME_LIMIT_FIELD};
pub use tool::{EpisodeSignal, Tool, ToolContext, ToolOutput, ToolStatus};
