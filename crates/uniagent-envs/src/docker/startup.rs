//! Starting a container: the start semaphore, finding the server's address, and waiting until
//! it answers.

use std::sync::OnceLock;
use std::time::Duration;

use bollard::Docker;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use uniagent_core::{Error, Result};

use super::engine::{docker_error, is_not_found, sandbox_error};
use super::spec::{Reach, SERVER_PORT};
use crate::client::RemoteRuntime;

/// The process-wide semaphore bounding concurrent container starts; sized by the first
/// configuration that starts a container.
pub(crate) fn start_slots(permits: usize) -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| Semaphore::new(permits.max(1)))
}

pub(crate) fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// The server's URL as seen from the host, for the reaches without a relay.
pub(crate) async fn server_url(docker: &Docker, id: &str, reach: Reach) -> Result<String> {
    match reach {
        Reach::HostPort(port) => return Ok(format!("http://127.0.0.1:{port}")),
        Reach::Relay => return Err(sandbox_error("a relayed server has no direct URL")),
        Reach::PublishedPort => {}
    }
    let inspected = docker
        .inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .map_err(|e| docker_error("inspecting the container", e))?;
    let settings = inspected.network_settings.unwrap_or_default();
    let port = settings
        .ports
        .and_then(|ports| ports.get(&format!("{SERVER_PORT}/tcp")).cloned().flatten())
        .and_then(|bindings| {
            bindings
                .into_iter()
                .find(|b| b.host_ip.as_deref() == Some("127.0.0.1"))
        })
        .and_then(|b| b.host_port)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| sandbox_error("Docker published no host port for the server"))?;
    Ok(format!("http://127.0.0.1:{port}"))
}

/// Probes `is_alive` (1 ms doubling to 50 ms between probes) until it answers, the container
/// stops, or `timeout` passes.
pub(crate) async fn wait_until_alive(
    runtime: &RemoteRuntime,
    docker: &Docker,
    id: &str,
    timeout: Duration,
) -> Result<()> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut probes = 0u32;
    loop {
        let probe = Duration::from_millis(500)
            .min(timeout.saturating_sub(start.elapsed()))
            .max(Duration::from_millis(20));
        if let Ok(answer) = runtime.is_alive(Some(probe)).await {
            if answer.is_alive {
                return Ok(());
            }
        }
        probes += 1;
        if probes % 10 == 0 {
            if let Some(why) = container_stopped(docker, id).await {
                return Err(sandbox_error(format!(
                    "the sandbox server stopped during startup: {why}"
                )));
            }
        }
        if start.elapsed() >= timeout {
            let why = container_stopped(docker, id).await.unwrap_or_default();
            return Err(Error::Timeout {
                operation: format!("starting the sandbox server in container {id} {why}"),
                after: timeout,
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// `Some(description)` when the container is not running (or gone).
pub(crate) async fn container_stopped(docker: &Docker, id: &str) -> Option<String> {
    match docker
        .inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
    {
        Ok(c) => {
            let state = c.state.unwrap_or_default();
            if state.running == Some(true) {
                return None;
            }
            Some(format!(
                "container exited with code {}{}{}",
                state.exit_code.unwrap_or_default(),
                if state.oom_killed == Some(true) {
                    " (killed by the OOM killer)"
                } else {
                    ""
                },
                state
                    .error
                    .filter(|e| !e.is_empty())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ))
        }
        Err(e) if is_not_found(&e) => Some("the container is gone".into()),
        Err(_) => None,
    }
}
