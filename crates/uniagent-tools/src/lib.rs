#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

mod install;
pub mod search;
pub mod toolbox;
pub mod tools;

pub use install::{
    find_toolbox_binary, install_toolbox, install_toolbox_with, ToolboxConfig, TOOLBOX_BINARY_ENV,
    TOOLBOX_BINARY_NAME,
};
pub use search::SearchTool;
pub use tools::session::shell_quote;
pub use tools::{ExecuteBash, Finish, ScriptTool, StrReplaceEditor, Submit};
