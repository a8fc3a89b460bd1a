//! [`HostDeployment`]: the `uniagent-sandbox` server as a child process on this machine.
//!
//! `start` creates a fresh instance directory (`work/` is the server's working directory,
//! `home/` an empty `HOME`, `server.log` its output), picks a free loopback port and a random
//! token, spawns the server in its own process group and waits until it answers `is_alive`.
//! `stop`, dropping the deployment, cancelling `start` and a panic all end the server and every
//! process it started (see `host::process` in the source for how), and remove the directory unless
//! [`HostConfig::keep_work_dir`] is set.

#[cfg(feature = "host")]
mod binary;
mod config;
#[cfg(feature = "host")]
mod deployment;
#[cfg(feature = "host")]
mod process;

#[cfg(feature = "host")]
pub use binary::{find_server_binary, SERVER_BINARY_NAME};
pub use config::*;
#[cfg(feature = "host")]
pub use deployment::{HostDeployment, HostInfo};
#[cfg(feature = "host")]
pub use process::{
    kill_marked_processes, kill_processes_marked_any, marked_processes, sweep_orphaned_instances,
    INSTANCE_ENV, OWNER_ENV,
};
