//! Sandboxes: the [`Deployment`] trait and the SWE-ReX protocol types it speaks.

mod deployment;
mod protocol;
mod quote;
mod setup;

pub use deployment::{Capabilities, Deployment, DeploymentExt};
pub use protocol::*;
pub use quote::shell_quote;
pub use setup::{Setup, SetupSandbox};
