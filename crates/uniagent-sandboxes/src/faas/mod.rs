//! [`FaasDeployment`]: a sandbox leased from one of several sandbox pools (`uniagent-pool`,
//! [`pool`](crate::pool) with feature `pool`) over plain HTTP, then driven over the SWE-ReX
//! protocol like [`remote`](crate::remote).
//!
//! # Lifecycle
//! `start` asks every pool for its capacity and requests a lease from the least loaded one,
//! moving on to the next when a pool is full, down or does not serve the image; when all
//! refuse, it waits and tries again as [`FaasConfig::retry`] allows, then fails with a
//! retryable [`Error::Sandbox`](uniagent_core::Error::Sandbox). While the sandbox runs, a background task renews the lease
//! every third of [`FaasConfig::lease_ttl`]; when the pool says the lease is gone, or no
//! renewal got through before it expired, every further operation fails with a
//! non-retryable [`Error::Sandbox`](uniagent_core::Error::Sandbox) naming why. `stop` and dropping the deployment release the
//! lease (the pool removes the container); a process killed without either leaves a lease
//! that expires within its TTL.
//!
//! ```no_run
//! # async fn demo() -> uniagent_core::Result<()> {
//! use std::time::Duration;
//!
//! use uniagent_core::{Deployment, DeploymentExt};
//! use uniagent_sandboxes::{FaasConfig, FaasDeployment};
//!
//! let sandbox = FaasDeployment::new(FaasConfig {
//!     control_url: "http://10.0.0.1:8700".into(),
//!     endpoints: vec!["http://10.0.0.2:8700".into()],
//!     image: "uniagent-sandbox-base:latest".into(),
//!     ..FaasConfig::default()
//! })?;
//! sandbox.start().await?;
//! assert_eq!(sandbox.sh("echo hi", Duration::from_secs(10)).await?.stdout, "hi\n");
//! sandbox.stop().await?; // also happens on drop
//! # Ok(()) }
//! ```

#[cfg(feature = "faas")]
mod acquire;
mod config;
#[cfg(feature = "faas")]
mod deployment;
#[cfg(feature = "faas")]
mod http;
#[cfg(feature = "faas")]
mod renew;

pub use config::*;

#[cfg(feature = "faas")]
const BACKEND: &str = "faas";

#[cfg(feature = "faas")]
pub use deployment::{FaasDeployment, FaasInfo};
