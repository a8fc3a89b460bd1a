#![doc = include_str!("../README.md")]

#[cfg(feature = "tch")]
pub mod model;

#[cfg(feature = "tch")]
pub mod rl;

#[cfg(feature = "tch")]
pub mod generate;
#[cfg(feature = "tch")]
pub mod trainer;
