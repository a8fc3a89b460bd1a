//! Removal of a container when its owner goes away without `stop`: dropped deployments,
//! cancelled starts and panics.

use std::time::Duration;

use bollard::Docker;

use super::reaper::remove_container;

/// Owns one container by name or id; force-removes it when dropped while armed.
///
/// Dropping happens in synchronous code, possibly inside (or after) a tokio runtime that is
/// shutting down, so the removal runs on a fresh thread with its own runtime and its own
/// connection to the daemon, and the drop waits for it (bounded by [`DROP_REMOVE_TIMEOUT`]).
#[derive(Debug)]
pub(crate) struct ContainerGuard {
    name: String,
    armed: bool,
}

/// The longest a drop waits for the daemon to remove the container.
const DROP_REMOVE_TIMEOUT: Duration = Duration::from_secs(30);

impl ContainerGuard {
    pub(crate) fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            armed: true,
        }
    }

    /// Removes the container now and disarms the guard.
    pub(crate) async fn remove(mut self, docker: &Docker) -> uniagent_core::Result<()> {
        self.armed = false;
        remove_container(docker, &self.name).await
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let name = std::mem::take(&mut self.name);
        crate::blocking::block_on_own_thread(async move {
            let removal = async {
                super::engine::count_call();
                let docker = Docker::connect_with_local_defaults()
                    .map_err(|e| super::engine::docker_error("connecting", e))?
                    .negotiate_version()
                    .await
                    .map_err(|e| super::engine::docker_error("connecting", e))?;
                remove_container(&docker, &name).await
            };
            match tokio::time::timeout(DROP_REMOVE_TIMEOUT, removal).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(container = %name, error = %e, "could not remove container on drop")
                }
                Err(_) => tracing::warn!(container = %name, "removing container on drop timed out"),
            }
        });
    }
}
