//! Sandboxes: the [`Deployment`] trait and the SWE-ReX protocol types it speaks.

mod deployment;
mod protocol;
mod quote;

pub use deployment::{Capabilities, Deployment, DeploymentExt};
pub use protocol::*;
pub use quote::shell_quote;
