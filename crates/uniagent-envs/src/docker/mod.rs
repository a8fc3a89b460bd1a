//! [`DockerDeployment`]: one local container per sandbox, started through the Docker Engine API
//! (bollard), with the `uniagent-sandbox` server copied in and every operation delegated to the
//! [`RemoteRuntime`] client.
//!
//! # Lifecycle
//! `start` sweeps leftovers of crashed runs (once per process), waits for a slot of the start
//! semaphore ([`DockerConfig::max_concurrent_starts`], process-wide), creates the container
//! (labelled with the run id, the owning process and a deadline), uploads the server (and the
//! toolbox when present) as a tar archive to `/opt/uniagent/bin`, starts it with the server as
//! the entrypoint under `docker-init`, and waits until the server answers `is_alive`. `stop`,
//! dropping the deployment, cancelling `start` and a panic all force-remove the container (with
//! its anonymous volumes); the reaper ([`reap_run`], `uniagent-docker cleanup --run-id`)
//! removes what a killed process left.
//!
//! # Isolation (defaults)
//! Memory limit without swap, CPU quota, pids limit, not privileged, **all capabilities
//! dropped** (the server binds an unprivileged port and runs shells as the image's user, so it
//! needs none; add some back with [`DockerConfig::cap_add`]), `no-new-privileges`, no network
//! (see [`network`](self::network) for how the host still reaches the server), optional
//! read-only root with a writable work dir and `/tmp`, and a lifetime after which the container
//! is removed whatever it is doing.
//!
//! # Errors
//! A command killed by the kernel's OOM killer, a server that died, and a sandbox that outlived
//! its lifetime are reported as [`Error::Sandbox`] naming the cause, not as a plain exit code.

mod engine;
mod guard;
mod labels;
pub mod network;
mod payload;
mod reaper;
mod spec;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bollard::query_parameters::{CreateImageOptions, UploadToContainerOptions};
use bollard::Docker;
use futures::StreamExt;
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;
use uniagent_core::sandbox::*;
use uniagent_core::{Capabilities, Error, Result, RetryConfig};

pub use engine::{daemon_reachable, engine};
pub use labels::{
    run_id, Owner, LABEL_DEADLINE, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN_ID, RUN_ID_ENV,
};
pub use payload::{Payload, BIN_DIR, SERVER_BINARY_ENV};
pub use reaper::{list_managed, reap_run, reap_stale, ManagedContainer, Reaped};

use crate::client::{RemoteRuntime, RemoteRuntimeOptions};
use crate::config::{DockerConfig, NetworkMode};
use engine::{docker_error, is_not_found, sandbox_error, BACKEND};
use guard::ContainerGuard;
use spec::{Reach, SERVER_PORT};

/// A sandbox in a local container.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use uniagent_core::{Deployment, DeploymentExt};
/// use uniagent_envs::{DockerConfig, DockerDeployment};
///
/// let sandbox = DockerDeployment::new(DockerConfig {
///     image: "uniagent-sandbox-base:latest".into(), // scripts/build-sandbox-image.sh
///     memory_bytes: Some(256 << 20),
///     ..DockerConfig::default()
/// });
/// sandbox.start().await?;
/// assert_eq!(sandbox.sh("echo hi", 10.0).await?.stdout, "hi\n");
/// sandbox.stop().await?; // also happens on drop
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DockerDeployment {
    config: DockerConfig,
    state: Mutex<State>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    New,
    Stopped,
}

#[derive(Debug)]
enum State {
    Idle(Phase),
    Running(Box<Running>),
}

/// Field order matters: the lifetime timer is aborted before the container is removed.
#[derive(Debug)]
struct Running {
    watch: Watch,
    lifetime_timer: Option<AbortOnDrop>,
    container: ContainerGuard,
    info: DockerInfo,
}

/// What the operations need to explain a failure.
#[derive(Debug, Clone)]
struct Watch {
    runtime: RemoteRuntime,
    docker: Docker,
    id: String,
    expired: Arc<AtomicBool>,
    oom_kills: Arc<AtomicU64>,
    lifetime: Option<Duration>,
    memory_bytes: Option<u64>,
}

/// Where a running docker deployment lives, for inspection and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerInfo {
    /// Container id.
    pub container_id: String,
    /// Container name (`uniagent-<hex>`).
    pub name: String,
    /// The server's base URL as seen from the host.
    pub url: String,
    /// The run id the container is labelled with.
    pub run_id: String,
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Exit codes of a process killed by SIGKILL (shell convention, and the raw signal).
const KILLED_CODES: [i64; 2] = [137, -9];

impl DockerDeployment {
    /// A deployment that will start the container described by `config`.
    pub fn new(config: DockerConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::Idle(Phase::New)),
        }
    }

    /// Where the running container is; `None` unless started.
    pub async fn info(&self) -> Option<DockerInfo> {
        match &*self.state.lock().await {
            State::Running(r) => Some(r.info.clone()),
            State::Idle(_) => None,
        }
    }

    async fn watch(&self, operation: &str) -> Result<Watch> {
        match &*self.state.lock().await {
            State::Running(r) => Ok(r.watch.clone()),
            State::Idle(phase) => Err(sandbox_error(format!(
                "cannot {operation}: {}",
                match phase {
                    Phase::New => "the deployment was not started",
                    Phase::Stopped => "the deployment was stopped",
                }
            ))),
        }
    }

    async fn do_start(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        if matches!(*state, State::Running(_)) {
            return Ok(());
        }
        let docker = engine().await?;
        reaper::reap_stale_once(&docker).await;
        let _slot = start_slots(self.config.max_concurrent_starts)
            .acquire()
            .await
            .map_err(|_| Error::internal("the container start semaphore was closed"))?;
        let running = self.launch(docker).await?;
        *state = State::Running(Box::new(running));
        Ok(())
    }

    async fn launch(&self, docker: Docker) -> Result<Running> {
        let config = &self.config;
        let image_path = self.ensure_image(&docker).await?;
        let archive = Payload::locate(
            config.server_binary.as_deref(),
            config.toolbox_binary.as_deref(),
        )?
        .archive(config.read_only_root)?;
        let network = match config.network {
            NetworkMode::None => network::isolated_network(&docker).await?,
            NetworkMode::Bridge => "bridge".into(),
            NetworkMode::Host => "host".into(),
        };
        let reach = spec::reach_for(config.network, free_loopback_port);
        if let Reach::HostPort(0) = reach {
            return Err(sandbox_error("cannot find a free loopback port"));
        }
        let run_id = run_id(config.run_id.as_deref());
        let deadline = config
            .lifetime
            .map(|l| reaper::now_unix() + l.as_secs().max(1));
        let token = labels::random_hex(16);
        let name = format!("uniagent-{}", labels::random_hex(8));
        let body = spec::container_body(&spec::Launch {
            config,
            token: &token,
            labels: labels::container_labels(&run_id, deadline),
            image_path,
            network,
            reach,
        });
        // Armed before the request: a cancelled or failed start removes whatever was created.
        let container = ContainerGuard::new(name.clone());
        let created = docker
            .create_container(
                Some(bollard::query_parameters::CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| {
                docker_error(&format!("creating a container from `{}`", config.image), e)
            })?;
        docker
            .upload_to_container(
                &created.id,
                Some(UploadToContainerOptions {
                    path: if config.read_only_root {
                        "/opt/uniagent".into()
                    } else {
                        "/".into()
                    },
                    ..Default::default()
                }),
                bollard::body_full(archive.into()),
            )
            .await
            .map_err(|e| docker_error("copying the sandbox server into the container", e))?;
        docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| docker_error("starting the container", e))?;
        let url = server_url(&docker, &created.id, reach).await?;
        let probe_runtime = RemoteRuntime::new(
            &url,
            Some(token.clone()),
            RemoteRuntimeOptions {
                backend: BACKEND.into(),
                retry: RetryConfig::none(),
                ..RemoteRuntimeOptions::default()
            },
        )?;
        wait_until_alive(&probe_runtime, &docker, &created.id, config.startup_timeout).await?;
        let runtime = RemoteRuntime::new(
            &url,
            Some(token),
            RemoteRuntimeOptions {
                backend: BACKEND.into(),
                ..RemoteRuntimeOptions::default()
            },
        )?;
        let watch = Watch {
            runtime,
            docker: docker.clone(),
            id: created.id.clone(),
            expired: Arc::new(AtomicBool::new(false)),
            oom_kills: Arc::new(AtomicU64::new(0)),
            lifetime: config.lifetime,
            memory_bytes: config.memory_bytes,
        };
        if let Some(count) = watch.read_oom_kills().await {
            watch.oom_kills.store(count, Ordering::SeqCst);
        }
        let lifetime_timer = config.lifetime.map(|lifetime| {
            let (docker, id, expired) = (docker.clone(), created.id.clone(), watch.expired.clone());
            AbortOnDrop(tokio::spawn(async move {
                tokio::time::sleep(lifetime).await;
                expired.store(true, Ordering::SeqCst);
                if let Err(e) = reaper::remove_container(&docker, &id).await {
                    tracing::warn!(container = %id, error = %e, "could not remove an expired sandbox");
                }
            }))
        });
        Ok(Running {
            info: DockerInfo {
                container_id: created.id,
                name,
                url,
                run_id,
            },
            watch,
            lifetime_timer,
            container,
        })
    }

    /// Checks that the image is local (pulling it when configured) and returns its `PATH`.
    async fn ensure_image(&self, docker: &Docker) -> Result<Option<String>> {
        let image = &self.config.image;
        let inspected = match docker.inspect_image(image).await {
            Ok(found) => found,
            Err(e) if is_not_found(&e) && self.config.pull => {
                let mut progress = docker.create_image(
                    Some(CreateImageOptions {
                        from_image: Some(image.clone()),
                        ..Default::default()
                    }),
                    None,
                    None,
                );
                while let Some(step) = progress.next().await {
                    step.map_err(|e| docker_error(&format!("pulling `{image}`"), e))?;
                }
                docker
                    .inspect_image(image)
                    .await
                    .map_err(|e| docker_error(&format!("inspecting `{image}`"), e))?
            }
            Err(e) if is_not_found(&e) => {
                return Err(Error::Config {
                    message: format!(
                        "docker image `{image}` is not present locally; build one with \
                         scripts/build-sandbox-image.sh or set docker.pull = true"
                    ),
                    source: Some(Box::new(e)),
                })
            }
            Err(e) => return Err(docker_error(&format!("inspecting `{image}`"), e)),
        };
        Ok(inspected.config.and_then(|c| c.env).and_then(|env| {
            env.into_iter()
                .find_map(|kv| kv.strip_prefix("PATH=").map(str::to_owned))
        }))
    }

    async fn do_stop(&self) -> Result<()> {
        let previous =
            std::mem::replace(&mut *self.state.lock().await, State::Idle(Phase::Stopped));
        let State::Running(running) = previous else {
            return Ok(());
        };
        let Running {
            watch,
            lifetime_timer,
            container,
            ..
        } = *running;
        drop(lifetime_timer);
        // Sessions first, so shells end their jobs the polite way; a dead server is no error.
        let _ = tokio::time::timeout(Duration::from_secs(2), watch.runtime.close()).await;
        container.remove(&watch.docker).await
    }
}

/// The process-wide semaphore bounding concurrent container starts; sized by the first
/// configuration that starts a container.
fn start_slots(permits: usize) -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| Semaphore::new(permits.max(1)))
}

fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// The server's URL as seen from the host.
async fn server_url(docker: &Docker, id: &str, reach: Reach) -> Result<String> {
    if let Reach::HostPort(port) = reach {
        return Ok(format!("http://127.0.0.1:{port}"));
    }
    let inspected = docker
        .inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .map_err(|e| docker_error("inspecting the container", e))?;
    let settings = inspected.network_settings.unwrap_or_default();
    match reach {
        Reach::PublishedPort => {
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
        _ => {
            let address = settings
                .networks
                .and_then(|networks| networks.get(network::ISOLATED_NETWORK).cloned())
                .and_then(|endpoint| endpoint.ip_address)
                .filter(|ip| !ip.is_empty())
                .ok_or_else(|| {
                    sandbox_error(format!(
                        "the container has no address on `{}`",
                        network::ISOLATED_NETWORK
                    ))
                })?;
            Ok(format!("http://{address}:{SERVER_PORT}"))
        }
    }
}

/// Probes `is_alive` (1 ms doubling to 50 ms between probes) until it answers, the container
/// stops, or `timeout` passes.
async fn wait_until_alive(
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
async fn container_stopped(docker: &Docker, id: &str) -> Option<String> {
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

impl Watch {
    /// The kernel's OOM kill count for the container's memory cgroup, read from inside
    /// (cgroup v1 `memory.oom_control`, v2 `memory.events`).
    async fn read_oom_kills(&self) -> Option<u64> {
        for (path, key) in [
            ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
            ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ] {
            let Ok(file) = self.runtime.read_file(&ReadFileRequest::new(path)).await else {
                continue;
            };
            if let Some(count) = file.content.lines().find_map(|line| {
                let (name, value) = line.split_once(' ')?;
                (name == key).then(|| value.trim().parse().ok()).flatten()
            }) {
                return Some(count);
            }
        }
        None
    }

    fn oom_error(&self, operation: &str) -> Error {
        sandbox_error(format!(
            "{operation}: out of memory: the container hit its memory limit{} and the kernel's \
             OOM killer killed a process",
            self.memory_bytes
                .map(|b| format!(" of {b} bytes"))
                .unwrap_or_default()
        ))
    }

    /// A process ended by SIGKILL: an OOM kill if the cgroup's count went up.
    async fn check_killed(&self, operation: &str, exit_code: Option<i64>) -> Result<()> {
        if !exit_code.is_some_and(|c| KILLED_CODES.contains(&c)) {
            return Ok(());
        }
        let now = match self.read_oom_kills().await {
            Some(count) => count,
            None => {
                return match container_stopped(&self.docker, &self.id).await {
                    Some(why) => Err(sandbox_error(format!("{operation}: {why}"))),
                    None => Ok(()),
                }
            }
        };
        if now > self.oom_kills.swap(now, Ordering::SeqCst) {
            return Err(self.oom_error(operation));
        }
        Ok(())
    }

    /// Explains an infrastructure error: lifetime exceeded, OOM, container gone.
    async fn explain(&self, operation: &str, error: Error) -> Error {
        if matches!(error, Error::Runtime { .. }) {
            return error;
        }
        if self.expired.load(Ordering::SeqCst) {
            return sandbox_error(format!(
                "{operation}: the sandbox outlived its lifetime limit of {:?} and was removed",
                self.lifetime.unwrap_or_default()
            ));
        }
        match container_stopped(&self.docker, &self.id).await {
            Some(why) if why.contains("OOM") => self.oom_error(operation),
            Some(why) => sandbox_error(format!("{operation}: {why} ({error})")),
            None => error,
        }
    }
}

impl DockerDeployment {
    async fn call<T, F, Fut>(
        &self,
        operation: &str,
        exit_code: impl Fn(&T) -> Option<i64>,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(RemoteRuntime) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let watch = self.watch(operation).await?;
        match f(watch.runtime.clone()).await {
            Ok(value) => {
                watch.check_killed(operation, exit_code(&value)).await?;
                Ok(value)
            }
            Err(error) => Err(watch.explain(operation, error).await),
        }
    }
}

fn no_code<T>(_: &T) -> Option<i64> {
    None
}

#[async_trait::async_trait]
impl uniagent_core::Deployment for DockerDeployment {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::full_protocol();
        caps.resource_limits = self.config.memory_bytes.is_some()
            && self.config.pids_limit.is_some()
            && self.config.cpus.is_some();
        caps.network_isolation = self.config.network == NetworkMode::None;
        caps
    }

    async fn start(&self) -> Result<()> {
        self.do_start().await
    }

    async fn stop(&self) -> Result<()> {
        self.do_stop().await
    }

    async fn is_alive(&self) -> Result<IsAliveResponse> {
        self.call(
            "is_alive",
            no_code,
            |rt| async move { rt.is_alive(None).await },
        )
        .await
    }

    async fn create_session(&self, request: CreateSessionRequest) -> Result<CreateSessionResponse> {
        self.call("create_session", no_code, |rt| async move {
            rt.create_session(&request).await
        })
        .await
    }

    async fn run_in_session(&self, action: Action) -> Result<BashObservation> {
        self.call(
            "run_in_session",
            |obs: &BashObservation| obs.exit_code.map(i64::from),
            |rt| async move { rt.run_in_session(&action).await },
        )
        .await
    }

    async fn close_session(&self, request: CloseSessionRequest) -> Result<CloseSessionResponse> {
        self.call("close_session", no_code, |rt| async move {
            rt.close_session(&request).await
        })
        .await
    }

    async fn execute(&self, command: Command) -> Result<CommandResponse> {
        self.call(
            "execute",
            |r: &CommandResponse| r.exit_code.map(i64::from),
            |rt| async move { rt.execute(&command).await },
        )
        .await
    }

    async fn read_file(&self, request: ReadFileRequest) -> Result<ReadFileResponse> {
        self.call("read_file", no_code, |rt| async move {
            rt.read_file(&request).await
        })
        .await
    }

    async fn write_file(&self, request: WriteFileRequest) -> Result<()> {
        self.call("write_file", no_code, |rt| async move {
            rt.write_file(&request).await
        })
        .await
    }

    async fn upload(&self, request: UploadRequest) -> Result<()> {
        self.call(
            "upload",
            no_code,
            |rt| async move { rt.upload(request).await },
        )
        .await
    }
}
