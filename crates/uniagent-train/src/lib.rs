#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

#[cfg(feature = "tch")]
pub mod model;

#[cfg(feature = "tch")]
pub mod rl;

#[cfg(feature = "tch")]
pub mod generate;
#[cfg(feature = "tch")]
pub mod trainer;

#[cfg(feature = "tch")]
pub mod pipeline;

#[cfg(feature = "tch")]
pub mod scratch;

pub mod telemetry;

#[cfg(feature = "parquet")]
pub mod export;

/// The `tch` crate this crate is built against, so that dependents use the same version.
#[cfg(feature = "tch")]
pub use tch;
