#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

pub mod config;
pub mod dataset;
pub mod env;
pub mod error;

pub use env::{
    check_tasks, Environment, EnvironmentBuilder, EnvironmentRegistry, EnvironmentSettings,
    RolloutParts, DEMONSTRATION_TURNS,
};
pub use error::{one_line, EnvError, ErrorKind, Result};
