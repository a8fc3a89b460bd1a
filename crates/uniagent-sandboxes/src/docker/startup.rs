//! Starting a container: the start semaphore, finding the server's address, and waiting until
//! it answers.

use std::sync::OnceLock;
use std::time::Duration;

use bollard::Docker;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use uniagent_core::{Error, Result, RetryConfig};

use super::engine::{daemon_timeout, docker_error, is_not_found, sandbox_error, BACKEND};
use super::spec::{Reach, SERVER_PORT};
use crate::client::{RemoteRuntime, RemoteRuntimeOptions};

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
    super::engine::count_call();
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

/// Waits until the server at `url` answers, within `timeout` in all.
///
/// A relayed server (`network: none`) is first awaited in its log, then probed once through
/// the relay with a deadline of seconds (its `docker exec` may take that long on a busy
/// daemon); a directly reachable one is probed with short deadlines.
pub(crate) async fn wait_ready(
    url: &str,
    token: &str,
    reach: Reach,
    docker: &Docker,
    id: &str,
    timeout: Duration,
) -> Result<()> {
    let runtime = RemoteRuntime::new(
        url,
        Some(token.to_owned()),
        RemoteRuntimeOptions {
            backend: BACKEND.into(),
            retry: RetryConfig::none(),
            ..RemoteRuntimeOptions::default()
        },
    )?;
    let start = Instant::now();
    let probe_timeout = if reach == Reach::Relay {
        wait_until_listening(docker, id, timeout).await?;
        (timeout.saturating_sub(start.elapsed()) / 2).max(Duration::from_secs(5))
    } else {
        Duration::from_millis(500)
    };
    let left = timeout.saturating_sub(start.elapsed());
    wait_until_alive(&runtime, docker, id, left, probe_timeout).await
}

/// What the server prints once it listens (see the `uniagent-sandbox` binary).
const LISTENING: &[u8] = b"uniagent-sandbox listening on ";

/// The output kept for an error message when the server never listens.
const KEPT_OUTPUT: usize = 2048;

/// Follows the container's output until the server prints that it listens, the container
/// stops, or `timeout` passes.
///
/// For a relayed server (`network: none`) this replaces probing: each probe would open a
/// connection, and each connection costs a `docker exec`. Under load a probe times out before
/// its exec even starts, the next probe adds another exec, and a few dozen starting sandboxes
/// keep the daemon too busy for any of them to start. Following the log is one request.
pub(crate) async fn wait_until_listening(
    docker: &Docker,
    id: &str,
    timeout: Duration,
) -> Result<()> {
    let options = bollard::query_parameters::LogsOptionsBuilder::new()
        .follow(true)
        .stdout(true)
        .stderr(true)
        .build();
    let mut output: Vec<u8> = Vec::new();
    let follow = async {
        super::engine::count_call();
        let mut stream = std::pin::pin!(docker.logs(id, Some(options)));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| docker_error("following the container's output", e))?;
            output.extend_from_slice(chunk.as_ref());
            if contains(&output, LISTENING) {
                return Ok(true);
            }
            // Keep a tail for the error message (longer than the marker, so a marker split
            // across chunks is still found).
            if output.len() > KEPT_OUTPUT {
                output.drain(..output.len() - KEPT_OUTPUT);
            }
        }
        Ok::<_, Error>(false)
    };
    match tokio::time::timeout(timeout, follow).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => {
            let why = container_stopped(docker, id).await.unwrap_or_default();
            Err(sandbox_error(format!(
                "the sandbox server stopped during startup {why}: {}",
                String::from_utf8_lossy(&output).trim()
            )))
        }
        Ok(Err(e)) => Err(e),
        // The follow has no deadline of bollard's past the answer's head: this is it. Whether
        // the server was slow or the daemon stopped answering, a bounded inspect tells.
        Err(_) => match container_state(docker, id).await {
            Err(e) => Err(e),
            Ok(why) => Err(Error::Timeout {
                operation: format!(
                    "starting the sandbox server in container {id} {}",
                    why.unwrap_or_default()
                ),
                after: timeout,
            }),
        },
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Probes `is_alive` (1 ms doubling to 50 ms between probes, each waiting at most
/// `probe_timeout`) until it answers, the container stops, or `timeout` passes.
async fn wait_until_alive(
    runtime: &RemoteRuntime,
    docker: &Docker,
    id: &str,
    timeout: Duration,
    probe_timeout: Duration,
) -> Result<()> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut probes = 0u32;
    loop {
        let probe = probe_timeout
            .min(timeout.saturating_sub(start.elapsed()))
            .max(Duration::from_millis(20));
        if let Ok(answer) = runtime.is_alive(Some(probe)).await {
            if answer.is_alive {
                return Ok(());
            }
        }
        probes += 1;
        if probes.is_multiple_of(10) {
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

/// Deadline of the inspect that explains a failure: an explanation that does not come within
/// seconds is not worth the wait (the caller has an error to report already).
const INSPECT_TIMEOUT: Duration = Duration::from_secs(15);

/// `Some(description)` when the container is not running (or gone); `None` when it runs or
/// the daemon did not say within seconds.
pub(crate) async fn container_stopped(docker: &Docker, id: &str) -> Option<String> {
    container_state(docker, id).await.ok().flatten()
}

/// Like [`container_stopped`], with a daemon that did not answer (or failed) as an error: a
/// retryable sandbox error once [`INSPECT_TIMEOUT`] passes.
async fn container_state(docker: &Docker, id: &str) -> Result<Option<String>> {
    super::engine::count_call();
    let inspected = tokio::time::timeout(
        INSPECT_TIMEOUT,
        docker.inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        ),
    )
    .await
    .map_err(|_| daemon_timeout("inspecting the container", INSPECT_TIMEOUT))?;
    Ok(match inspected {
        Ok(c) => {
            let state = c.state.unwrap_or_default();
            if state.running == Some(true) {
                return Ok(None);
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
        Err(e) => return Err(docker_error("inspecting the container", e)),
    })
}
