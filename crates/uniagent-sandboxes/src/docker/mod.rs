//! [`DockerDeployment`]: one local container per sandbox, started through the Docker Engine API
//! (bollard), with the `uniagent-sandbox` server copied in and every operation delegated to the
//! [`RemoteRuntime`](crate::client::RemoteRuntime) client.
//!
//! # Lifecycle
//! `start` sweeps leftovers of crashed runs (once per process), waits for a slot of the start
//! semaphore ([`DockerConfig::max_concurrent_starts`], process-wide), creates the container
//! (labelled with the run id, the owning process and a deadline) from the image plus the server
//! (and the toolbox when present) in `/opt/uniagent/bin` — uploaded as a tar archive through the
//! Docker API and committed once per image and binary, see [`PAYLOAD_REPO`] — starts it with
//! the server as the entrypoint under `docker-init`, and waits until the server answers
//! `is_alive`. `stop`,
//! dropping the deployment, cancelling `start` and a panic all force-remove the container (with
//! its anonymous volumes); the reaper ([`reap_run`], `uniagent-docker cleanup --run-id`)
//! removes what a killed process left.
//!
//! # Isolation (defaults)
//! Memory limit without swap, CPU quota, pids limit, not privileged, **all capabilities
//! dropped** (the server binds an unprivileged port and runs shells as the image's user, so it
//! needs none; add some back with [`DockerConfig::cap_add`]), `no-new-privileges`, no network
//! at all (Docker's `none` network: the container has only loopback, and the host reaches the
//! server through a relay over one `docker exec`, see below), optional read-only root with a writable
//! work dir and `/tmp`, and a lifetime after which the container is removed whatever it is
//! doing.
//!
//! # Reaching the server
//! - `network: none` (default): the server listens on 127.0.0.1:8000 inside the container. The
//!   deployment binds a listener on the host's 127.0.0.1 (ephemeral port) and runs one
//!   long-lived `uniagent-sandbox --relay-mux 127.0.0.1:8000` in the container through the
//!   Docker API (attached stdin/stdout, no TTY); every connection to the listener becomes a
//!   connection id on that exec's framed stream ([`crate::mux`]), with half-closes and
//!   per-connection flow control, so a stalled client blocks no other. The daemon sees one exec
//!   per sandbox (plus one each time the exec dies and the next connection restarts it), not
//!   one per connection ([`DockerDeployment::relay_stats`], [`daemon_calls`]). Nothing in the
//!   container can reach the host, other sandboxes or the internet, on any Docker host and
//!   without firewall rules. The relay's tasks end when the deployment stops or is dropped.
//! - `network: bridge`: Docker's default bridge, the server's port published on 127.0.0.1.
//! - `network: host`: the host's network namespace, the server on a free loopback port.
//!
//! # Errors
//! A command killed by the kernel's OOM killer, a server that died, and a sandbox that outlived
//! its lifetime are reported as [`Error::Sandbox`](uniagent_core::Error::Sandbox) naming the cause, not as a plain exit code.

#[cfg(feature = "docker")]
mod build;
mod config;
#[cfg(feature = "docker")]
mod deployment;
#[cfg(feature = "docker")]
pub(crate) mod engine;
#[cfg(feature = "docker")]
mod guard;
#[cfg(feature = "docker")]
mod image;
#[cfg(feature = "docker")]
pub(crate) mod labels;
#[cfg(feature = "docker")]
mod payload;
#[cfg(feature = "docker")]
pub(crate) mod reaper;
#[cfg(feature = "docker")]
pub(crate) mod relay;
#[cfg(feature = "docker")]
pub(crate) mod spec;
#[cfg(feature = "docker")]
pub(crate) mod startup;
#[cfg(feature = "docker")]
mod watch;

#[cfg(feature = "docker")]
pub use build::{base_images, build_context};
pub use config::*;
#[cfg(feature = "docker")]
pub use deployment::{DockerDeployment, DockerInfo};
#[cfg(feature = "docker")]
pub use engine::{daemon_calls, daemon_reachable, engine};
#[cfg(feature = "docker")]
pub use image::{prune_payload_images, LABEL_PAYLOAD_FILES, LABEL_PAYLOAD_STAMP, PAYLOAD_REPO};
#[cfg(feature = "docker")]
pub use labels::{
    run_id, Owner, LABEL_DEADLINE, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN_ID, RUN_ID_ENV,
};
#[cfg(feature = "docker")]
pub use payload::{Payload, BIN_DIR, SERVER_BINARY_ENV};
#[cfg(feature = "docker")]
pub use reaper::{list_managed, reap_run, reap_stale, ManagedContainer, Reaped};
#[cfg(feature = "docker")]
pub use relay::RelayStats;
