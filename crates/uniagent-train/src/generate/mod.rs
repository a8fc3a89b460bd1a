//! The generation engine: batched decoding with a KV cache, greedy / temperature / top-p /
//! top-k sampling, stop ids, and logprobs under the unmodified distribution; implements
//! [`TokenGenerator`](uniagent_core::TokenGenerator).

mod batch;
mod decode;
mod engine;
mod sampler;

pub use batch::{generate_batch, generate_batch_with, LogprobKind};
pub use decode::{DecodeBatch, Rejected};
pub use engine::{EngineConfig, TchEngine};
pub use sampler::{sample_token, score_token, Sampled};
