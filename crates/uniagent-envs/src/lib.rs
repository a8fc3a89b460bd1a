#![doc = include_str!("../README.md")]
// `uniagent_core::Error` is 168 bytes (it carries a whole `RemoteException`); every fallible
// function here returns it, so the size lint is silenced crate-wide rather than per function.
#![allow(clippy::result_large_err)]

pub mod client;
pub mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "docker")]
pub mod docker;
#[cfg(feature = "host")]
pub mod host;
#[cfg(any(feature = "host", feature = "remote"))]
mod lifecycle;
#[cfg(feature = "remote")]
pub mod remote;
#[cfg(any(feature = "openai", feature = "vllm", feature = "sglang"))]
pub mod models;
#[cfg(feature = "server")]
pub mod server;

pub use config::{DeploymentConfig, DockerConfig, FaasConfig, HostConfig, NetworkMode, RemoteConfig};
pub use client::{RemoteRuntime, RemoteRuntimeOptions};
#[cfg(feature = "docker")]
pub use docker::DockerDeployment;
#[cfg(feature = "host")]
pub use host::HostDeployment;
#[cfg(feature = "remote")]
pub use remote::RemoteDeployment;
