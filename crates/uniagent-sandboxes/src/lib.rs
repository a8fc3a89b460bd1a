#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

#[cfg(any(feature = "host", feature = "docker"))]
mod binaries;
#[cfg(any(feature = "docker", feature = "faas", feature = "k8s"))]
mod blocking;
#[cfg(feature = "client")]
pub mod client;
pub mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod docker;
pub mod faas;
#[cfg(feature = "server")]
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
pub mod k8s;
#[cfg(any(feature = "pool", feature = "faas"))]
pub mod leases;
#[cfg(any(
    feature = "host",
    feature = "remote",
    feature = "faas",
    feature = "docker",
    feature = "k8s"
))]
mod lifecycle;
#[cfg(any(feature = "docker", feature = "server"))]
pub mod mux;
pub mod owner;
#[cfg(feature = "pool")]
pub mod pool;
pub mod remote;
pub mod secret;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "signed-token")]
pub mod signed_token;
pub mod telemetry;

#[cfg(feature = "client")]
pub use client::{RemoteRuntime, RemoteRuntimeOptions};
pub use config::{
    BackendBuilder, BackendConfig, DeploymentConfig, DockerConfig, FaasConfig, HostConfig,
    NetworkMode, RemoteConfig, SandboxLimits, BACKENDS,
};
#[cfg(feature = "docker")]
pub use docker::DockerDeployment;
#[cfg(feature = "faas")]
pub use faas::FaasDeployment;
#[cfg(feature = "host")]
pub use host::HostDeployment;
#[cfg(feature = "remote")]
pub use remote::RemoteDeployment;
