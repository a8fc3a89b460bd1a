//! The token-level record of one trajectory and its verl-compatible export.

mod cache;
mod output;
mod sources;

pub use cache::{
    CacheCheckpoint, CacheDelta, LengthLimits, Provenance, RolloutCache, TokenSource, TokenTrace,
};
pub use output::{AgentLoopMetrics, AgentLoopOutput};
pub use sources::TokenSourceRuns;
