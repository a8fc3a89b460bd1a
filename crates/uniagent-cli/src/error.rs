//! The command's error type is the library's: [`uniagent_envs::EnvError`], under the name the
//! command's code has always used. Its kinds are the exit-code contract of `docs/cli.md`.

pub use uniagent_envs::error::{one_line, ErrorKind, Result};
pub use uniagent_envs::EnvError as CliError;
