#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod cli;
pub mod config;
mod error;
pub mod model;
pub mod output;
mod progress;
mod replay;
pub mod report;
pub mod run;
pub mod serve;
#[cfg(feature = "tch")]
pub mod train;
pub mod view;

pub use error::{one_line, CliError, ErrorKind, Result};
/// The environments and datasets, from `uniagent-envs` (where `uniagent_cli::env` and
/// `uniagent_cli::dataset` moved).
pub use uniagent_envs::{dataset, env};
