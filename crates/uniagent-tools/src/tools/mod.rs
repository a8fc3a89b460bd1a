//! The built-in [`Tool`](uniagent_core::Tool)s.

mod bash;
mod editor;
mod episode;
mod script;
pub mod session;

pub use bash::{clean_terminal_output, timeout_message, ExecuteBash, NO_OUTPUT};
pub use editor::{StrReplaceEditor, INLINE_ARGS_LIMIT};
pub use episode::{Finish, Submit};
pub use script::ScriptTool;
