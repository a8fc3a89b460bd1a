//! Scripted implementations of the core traits, for tests (feature `test-utils`).
//!
//! They are real implementations with deterministic behaviour, not mocks that assert on call
//! order: a [`ScriptedChatModel`] replays assistant turns and records what it was asked, a
//! [`ScriptedDeployment`] is an in-memory sandbox with scripted command results, a
//! [`RecordingTool`] answers with a function of its arguments and records every call, a
//! [`BashTool`] runs commands in a sandbox's bash session, and
//! (feature `codec`) a [`ScriptedTokenGenerator`] replays a script as token ids through a real
//! codec, for the real [`TokenChatModel`](crate::agent::TokenChatModel).

mod bash;
mod child_stdin;
mod deployment;
mod model;
mod process;
mod schema;
#[cfg(feature = "codec")]
mod token_generator;
mod tool;

pub use bash::BashTool;
pub use child_stdin::output_with_stdin;
pub use deployment::{ScriptedDeployment, ScriptedReply};
pub use model::{ModelRequest, ScriptedChatModel, ScriptedTurn};
pub use process::{free_port, sandbox_server_args, spawn_with_first_line};
pub use schema::{cassette_violations, trajectory_record_violations};
#[cfg(feature = "codec")]
pub use token_generator::{assistant_text, ScriptedTokenGenerator, SCRIPTED_LOGPROB};
pub use tool::{RecordedCall, RecordingTool};

/// Locks a mutex, recovering the data if a panicking test poisoned it.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
