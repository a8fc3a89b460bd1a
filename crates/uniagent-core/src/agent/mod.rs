//! The interaction loop: [`AgentInteraction`] turns a task into a [`Trajectory`].
//!
//! - [`exit`](ExitReason): the closed set of endings and the [`MaskPolicy`] that decides which
//!   are kept out of training;
//! - [`LoopConfig`]: limits (turns, tokens, wall clock), budgets (tool timeouts, format
//!   errors) and policies, as a serde struct with defaults;
//! - [`Trajectory`]: verl's `AgentLoopOutput` fields plus messages, exit reason, reward and
//!   per-phase timings — one JSONL line per rollout;
//! - [`CancellationToken`] (tokio-util's): cooperative cancellation shared by every rollout of a
//!   run.

mod config;
mod episode;
mod exit;
mod feedback;
mod interaction;
#[cfg(feature = "codec")]
mod token_model;
mod trajectory;
mod turn;

pub use config::LoopConfig;
pub use exit::{ExitClass, ExitReason, MaskPolicy};
pub use feedback::{
    clip_observation, NO_FUNCTION_CALL, SKIPPED_CANCELLED, SKIPPED_SANDBOX, SKIPPED_TIMEOUT_BUDGET,
    SKIPPED_WALL_CLOCK,
};
pub use interaction::{AgentInteraction, RolloutControl};
#[cfg(feature = "codec")]
pub use token_model::TokenChatModel;
pub use tokio_util::sync::CancellationToken;
pub use trajectory::{rollout_id, EpisodeCounts, PhaseTimings, TrainingUse, Trajectory};
