#![doc = include_str!("../README.md")]

pub mod config;
#[cfg(any(feature = "openai", feature = "vllm", feature = "sglang"))]
pub mod models;
#[cfg(feature = "server")]
pub mod server;

pub use config::{DeploymentConfig, DockerConfig, FaasConfig, HostConfig, NetworkMode, RemoteConfig};
