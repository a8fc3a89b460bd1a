#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

pub mod answer;
pub mod command;
mod config;
mod error;
pub mod grade;
pub mod harbor;
pub mod r2e;
mod sandbox;
mod spec;
pub mod suite;
pub mod swebench;

pub use answer::{AnswerMatch, AnswerMetric};
pub use command::{CommandReward, CommandScore};
pub use error::RewardError;
pub use harbor::HarborVerifier;
pub use suite::{LogFormat, TestStatus, TestsReward};
