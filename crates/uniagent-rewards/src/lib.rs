#![doc = include_str!("../README.md")]

pub mod answer;
pub mod command;
mod error;
mod sandbox;
pub mod suite;

pub use answer::{AnswerMatch, AnswerMetric};
pub use command::{CommandReward, CommandScore};
pub use error::RewardError;
pub use suite::{LogFormat, TestStatus, TestsReward};
