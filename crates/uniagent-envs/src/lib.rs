#![doc = include_str!("../README.md")]

pub mod config;
#[cfg(feature = "server")]
pub mod server;

pub use config::{DeploymentConfig, DockerConfig, FaasConfig, HostConfig, NetworkMode, RemoteConfig};
