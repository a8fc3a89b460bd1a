//! Sandboxes: the [`Deployment`] trait and the SWE-ReX protocol types it speaks.

mod deployment;
mod protocol;

pub use deployment::{Capabilities, Deployment, DeploymentExt};
pub use protocol::*;
