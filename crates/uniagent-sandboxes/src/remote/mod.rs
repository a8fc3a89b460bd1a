//! [`RemoteDeployment`]: an already running SWE-ReX-protocol server at a URL, with a token.
//!
//! `start` waits until the server answers `is_alive` (within [`RemoteConfig::timeout`]); `stop`
//! closes every session on the server (`POST /close`) and leaves the server running, since this
//! deployment did not start it.

mod config;
#[cfg(feature = "remote")]
mod deployment;

pub use config::*;
#[cfg(feature = "remote")]
pub use deployment::RemoteDeployment;
