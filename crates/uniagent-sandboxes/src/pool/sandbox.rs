//! One sandbox of a pool: started through [`DockerDeployment`], or re-attached after a restart
//! from its container's labels and environment; stopped by removing its container.

use std::collections::HashMap;

use bollard::Docker;
use uniagent_core::{Deployment, Error, Result};

use super::proxy::Proxy;
use crate::config::DockerConfig;
use crate::docker::relay::Relay;
use crate::docker::spec::{Reach, SERVER_PORT, TOKEN_ENV};
use crate::docker::{reaper, startup, DockerDeployment, LABEL_OWNER};
use crate::leases::{Limits, LABEL_IMAGE, LABEL_LEASE, LABEL_POOL};

/// A started sandbox: where its server answers and with which token.
#[derive(Debug)]
pub(crate) struct Sandbox {
    /// Lease id; also in the container's [`LABEL_LEASE`].
    pub id: String,
    pub container_id: String,
    /// The server's URL as the pool reaches it.
    pub url: String,
    pub token: String,
    /// The proxy's own connections to this sandbox: never shared with another sandbox that
    /// later gets the same loopback port, and closed with it.
    pub proxy: Proxy,
    /// When it started (or was re-attached): warm sandboxes retire before their lifetime ends.
    pub started: std::time::Instant,
    holder: Holder,
}

/// What keeps the sandbox reachable; dropping it removes the container (started) or stops
/// the relay (attached, whose container the pool removes explicitly).
#[derive(Debug)]
enum Holder {
    Started(Box<DockerDeployment>),
    Attached(#[allow(dead_code)] Option<Relay>),
}

impl Sandbox {
    /// Starts a container of `template` (with `limits` applied) labelled for pool `pool`.
    pub(crate) async fn start(
        pool: &str,
        run_id: &str,
        template: &DockerConfig,
        limits: Option<&Limits>,
    ) -> Result<Self> {
        let id = crate::secret::random_hex(12)?;
        let mut config = template.clone();
        config.run_id = Some(run_id.to_owned());
        if let Some(limits) = limits {
            config.memory_bytes = limits.memory_bytes.or(config.memory_bytes);
            config.cpus = limits.cpus.or(config.cpus);
            config.pids_limit = limits.pids_limit.or(config.pids_limit);
        }
        let labels = HashMap::from([
            // Not a `host:pid:ticks` owner: no process's sweep of crashed owners touches it.
            (LABEL_OWNER.to_owned(), format!("pool/{pool}")),
            (LABEL_POOL.to_owned(), pool.to_owned()),
            (LABEL_LEASE.to_owned(), id.clone()),
            (LABEL_IMAGE.to_owned(), template.image.clone()),
        ]);
        let deployment = DockerDeployment::new(config).owned_by(labels);
        deployment.start().await?;
        let Some((info, token)) = deployment.endpoint().await else {
            return Err(Error::internal(
                "a started docker deployment has no endpoint",
            ));
        };
        Ok(Self {
            id,
            container_id: info.container_id,
            url: info.url,
            token,
            proxy: Proxy::new(),
            started: std::time::Instant::now(),
            holder: Holder::Started(Box::new(deployment)),
        })
    }

    /// Reaches the running container `container_id` again: its token from its environment,
    /// its server through a new relay (`network: none`) or its published port (`bridge`).
    pub(crate) async fn attach(docker: &Docker, id: String, container_id: String) -> Result<Self> {
        let inspected = docker
            .inspect_container(
                &container_id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .map_err(|e| pool_error(format!("inspecting container {container_id}: {e}")))?;
        let running = inspected
            .state
            .as_ref()
            .and_then(|s| s.running)
            .unwrap_or(false);
        if !running {
            return Err(pool_error(format!(
                "container {container_id} is not running"
            )));
        }
        let token = inspected
            .config
            .as_ref()
            .and_then(|c| c.env.as_ref())
            .and_then(|env| {
                env.iter()
                    .find_map(|kv| kv.strip_prefix(&format!("{TOKEN_ENV}=")).map(str::to_owned))
            })
            .ok_or_else(|| pool_error(format!("container {container_id} has no server token")))?;
        let network = inspected
            .host_config
            .as_ref()
            .and_then(|h| h.network_mode.clone())
            .unwrap_or_default();
        let (url, relay) = match network.as_str() {
            "none" => {
                let relay = Relay::start(docker.clone(), container_id.clone(), SERVER_PORT).await?;
                (relay.url(), Some(relay))
            }
            "bridge" | "default" => (
                startup::server_url(docker, &container_id, Reach::PublishedPort).await?,
                None,
            ),
            other => {
                return Err(pool_error(format!(
                    "container {container_id} uses network `{other}`, which a restarted pool \
                     cannot reach again"
                )))
            }
        };
        Ok(Self {
            id,
            container_id,
            url,
            token,
            proxy: Proxy::new(),
            started: std::time::Instant::now(),
            holder: Holder::Attached(relay),
        })
    }

    /// A sandbox with no container behind it, for the bookkeeping's unit tests.
    #[cfg(test)]
    pub(crate) fn detached(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            container_id: id.to_owned(),
            url: "http://127.0.0.1:9".into(),
            token: "t".into(),
            proxy: Proxy::new(),
            started: std::time::Instant::now(),
            holder: Holder::Attached(None),
        }
    }

    /// Removes the container.
    pub(crate) async fn stop(self, docker: &Docker) -> Result<()> {
        match self.holder {
            Holder::Started(deployment) => deployment.stop().await,
            Holder::Attached(relay) => {
                drop(relay);
                reaper::remove_container(docker, &self.container_id).await
            }
        }
    }
}

pub(crate) fn pool_error(message: impl Into<String>) -> Error {
    Error::Sandbox {
        backend: "pool".into(),
        message: message.into(),
        retryable: false,
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::docker::Owner;

    #[test]
    fn the_pool_owner_label_is_never_judged_as_a_crashed_process() {
        for name in ["node-a", "7", "1.2"] {
            assert_eq!(Owner::parse(&format!("pool/{name}")), None, "{name}");
        }
    }
}
