#![doc = include_str!("../README.md")]

pub mod config;

pub use config::{DeploymentConfig, DockerConfig, FaasConfig, HostConfig, NetworkMode, RemoteConfig};
