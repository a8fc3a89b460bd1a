//! The `docker` backend's deployment (feature `docker`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::query_parameters::CreateImageOptions;
use bollard::Docker;
use futures::StreamExt;
use tokio::sync::Mutex;
use uniagent_core::sandbox::*;
use uniagent_core::{Capabilities, Error, Result};

use super::engine::{docker_error, is_not_found, sandbox_error, BACKEND};
use super::{engine, image, labels, reaper, run_id, spec, Payload, RelayStats};
use crate::client::{RemoteRuntime, RemoteRuntimeOptions};
use crate::config::{DockerConfig, NetworkMode};
use crate::lifecycle::{close_sessions, not_running, Phase};

/// Deadline of pulling an image (`pull: true`), progress stream included: generous, since
/// images are large, but a daemon that stops answering does not hang a start for ever.
const PULL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
use super::guard::ContainerGuard;
use super::image::PayloadSource;
use super::relay::Relay;
use super::spec::{Reach, SERVER_PORT};
use super::startup::{free_loopback_port, server_url, start_slots, wait_ready};
use super::watch::Watch;

/// A sandbox in a local container.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use std::time::Duration;
///
/// use uniagent_core::{Deployment, DeploymentExt};
/// use uniagent_sandboxes::{DockerConfig, DockerDeployment};
///
/// let sandbox = DockerDeployment::new(DockerConfig {
///     image: "uniagent-sandbox-base:latest".into(), // scripts/build-sandbox-image.sh
///     memory_bytes: Some(256 << 20),
///     ..DockerConfig::default()
/// });
/// sandbox.start().await?;
/// assert_eq!(sandbox.sh("echo hi", Duration::from_secs(10)).await?.stdout, "hi\n");
/// sandbox.stop().await?; // also happens on drop
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DockerDeployment {
    config: DockerConfig,
    state: Mutex<State>,
    /// Labels of another owner (the sandbox pool) that replace the owning-process label, so the
    /// container outlives this process until that owner removes it.
    foreign_owner: Option<std::collections::HashMap<String, String>>,
}

type State = crate::lifecycle::State<Running>;

/// Field order matters: the lifetime timer and the relay stop before the container is removed.
#[derive(Debug)]
struct Running {
    watch: Watch,
    lifetime_timer: Option<AbortOnDrop>,
    relay: Option<Relay>,
    container: ContainerGuard,
    info: DockerInfo,
    /// The server's token (the pool hands it out as the lease token).
    #[cfg_attr(not(feature = "pool"), allow(dead_code))]
    token: String,
}

/// Where a running docker deployment lives, for inspection and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerInfo {
    /// Container id.
    pub container_id: String,
    /// Container name (`uniagent-<hex>`).
    pub name: String,
    /// The server's base URL as seen from the host (with `network: none`, the relay's
    /// listener on 127.0.0.1).
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

/// Creates the container `name` from `body`, copies `upload` into it when given, and starts
/// it; returns its id.
async fn create_and_start(
    docker: &Docker,
    name: &str,
    body: bollard::models::ContainerCreateBody,
    upload: Option<&Payload>,
    image: &str,
) -> Result<String> {
    engine::count_call();
    let created = docker
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(name.to_owned()),
                ..Default::default()
            }),
            body,
        )
        .await
        .map_err(|e| docker_error(&format!("creating a container from `{image}`"), e))?;
    if let Some(payload) = upload {
        image::upload_payload(docker, &created.id, payload).await?;
    }
    engine::count_call();
    docker
        .start_container(
            &created.id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| docker_error("starting the container", e))?;
    Ok(created.id)
}

/// Removes the watched container when its `lifetime` is over (marking it expired first, so
/// that failing calls are explained); dropping the handle cancels the timer.
fn expire_after(watch: &Watch, lifetime: Duration) -> AbortOnDrop {
    let (docker, id) = (watch.docker.clone(), watch.id.clone());
    let (expired, removed) = (watch.expired.clone(), watch.removed.clone());
    AbortOnDrop(tokio::spawn(async move {
        tokio::time::sleep(lifetime).await;
        expired.store(true, Ordering::SeqCst);
        if let Err(e) = reaper::remove_container(&docker, &id).await {
            tracing::warn!(container = %id, error = %e, "could not remove an expired sandbox");
        }
        removed.store(true, Ordering::SeqCst);
    }))
}

impl DockerDeployment {
    /// A deployment that will start the container described by `config`.
    pub fn new(config: DockerConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::Idle(Phase::New)),
            foreign_owner: None,
        }
    }

    /// A deployment whose container also carries `labels`, which name another owner than this
    /// process in [`LABEL_OWNER`] (a value [`Owner::parse`] does not read, so the per-process
    /// sweep of crashed owners leaves the container alone): whoever set them (the sandbox
    /// pool) removes it.
    #[cfg(feature = "pool")]
    pub(crate) fn owned_by(mut self, labels: std::collections::HashMap<String, String>) -> Self {
        self.foreign_owner = Some(labels);
        self
    }

    /// Where the running container is and the token of its server; `None` unless started.
    #[cfg(feature = "pool")]
    pub(crate) async fn endpoint(&self) -> Option<(DockerInfo, String)> {
        match &*self.state.lock().await {
            State::Running(r) => Some((r.info.clone(), r.token.clone())),
            State::Idle(_) => None,
        }
    }

    /// What the relay of a running `network: none` sandbox did so far (connections accepted,
    /// multiplexer execs started); `None` unless started with the relay.
    pub async fn relay_stats(&self) -> Option<RelayStats> {
        match &*self.state.lock().await {
            State::Running(r) => r.relay.as_ref().map(Relay::stats),
            State::Idle(_) => None,
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
            State::Idle(phase) => Err(not_running(BACKEND, *phase, operation)),
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
        let (base_id, image_path) = self.ensure_image(&docker).await?;
        let run_id = run_id(config.run_id.as_deref());
        let payload = Payload::locate(
            config.server_binary.as_deref(),
            config.toolbox_binary.as_deref(),
        )?;
        let source = image::payload_source(
            &docker,
            &base_id,
            &payload,
            config.read_only_root,
            labels::container_labels(&run_id, Some(reaper::now_unix() + 600)),
        )
        .await?;
        let image = match &source {
            PayloadSource::Image(tag) => tag.clone(),
            PayloadSource::Upload => base_id.clone(),
        };
        let reach = spec::reach_for(config.network, free_loopback_port);
        if let Reach::HostPort(0) = reach {
            return Err(sandbox_error("cannot find a free loopback port"));
        }
        let deadline = config
            .lifetime
            .map(|l| reaper::now_unix() + l.as_secs().max(1));
        let token = crate::secret::random_hex(16)
            .map_err(|e| sandbox_error(format!("cannot create the sandbox token: {e}")))?;
        let name = format!("uniagent-{}", labels::random_hex(8));
        let mut container_labels = labels::container_labels(&run_id, deadline);
        if let Some(owner) = &self.foreign_owner {
            // Replaced, not removed: a container inherits the payload image's labels, and
            // with them the owner label of whichever process built that image.
            container_labels.extend(owner.clone());
        }
        let body = spec::container_body(&spec::Launch {
            config,
            image,
            token: &token,
            labels: container_labels,
            image_path,
            reach,
        });
        // Armed before the request: a cancelled or failed start removes whatever was created.
        let container = ContainerGuard::new(name.clone());
        let upload = (source == PayloadSource::Upload).then_some(&payload);
        let created = create_and_start(&docker, &name, body, upload, &config.image).await?;
        let (url, relay) = match reach {
            Reach::Relay => {
                let relay = Relay::start(docker.clone(), created.clone(), SERVER_PORT).await?;
                (relay.url(), Some(relay))
            }
            _ => (server_url(&docker, &created, reach).await?, None),
        };
        wait_ready(
            &url,
            &token,
            reach,
            &docker,
            &created,
            config.startup_timeout,
        )
        .await?;
        let runtime = RemoteRuntime::new(
            &url,
            Some(token.clone()),
            RemoteRuntimeOptions {
                backend: BACKEND.into(),
                ..RemoteRuntimeOptions::default()
            },
        )?;
        let watch = Watch {
            runtime,
            docker: docker.clone(),
            id: created.clone(),
            expired: Arc::new(AtomicBool::new(false)),
            removed: Arc::new(AtomicBool::new(false)),
            oom_kills: Arc::new(AtomicU64::new(0)),
            lifetime: config.lifetime,
            memory_bytes: config.memory_bytes,
        };
        if let Some(count) = watch.read_oom_kills().await {
            watch.oom_kills.store(count, Ordering::SeqCst);
        }
        let lifetime_timer = config
            .lifetime
            .map(|lifetime| expire_after(&watch, lifetime));
        Ok(Running {
            info: DockerInfo {
                container_id: created,
                name,
                url,
                run_id,
            },
            watch,
            lifetime_timer,
            relay,
            container,
            token,
        })
    }

    /// Checks that the image is local (pulling it when configured) and returns its id and
    /// `PATH`.
    async fn ensure_image(&self, docker: &Docker) -> Result<(String, Option<String>)> {
        let image = &self.config.image;
        engine::count_call();
        let inspected = match docker.inspect_image(image).await {
            Ok(found) => found,
            Err(e) if is_not_found(&e) && self.config.pull => {
                engine::count_call();
                let mut progress = docker.create_image(
                    Some(CreateImageOptions {
                        from_image: Some(image.clone()),
                        ..Default::default()
                    }),
                    None,
                    None,
                );
                // A pull streams its progress: bollard's request timeout ends at the answer's
                // head, so the whole stream gets a deadline of its own.
                let pulled = async {
                    while let Some(step) = progress.next().await {
                        step?;
                    }
                    Ok(())
                };
                engine::within(&format!("pulling `{image}`"), PULL_TIMEOUT, pulled).await?;
                engine::count_call();
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
        let id = inspected.id.clone().unwrap_or_else(|| image.clone());
        let path = inspected.config.and_then(|c| c.env).and_then(|env| {
            env.into_iter()
                .find_map(|kv| kv.strip_prefix("PATH=").map(str::to_owned))
        });
        Ok((id, path))
    }

    async fn do_stop(&self) -> Result<()> {
        let Some(running) = self.state.lock().await.stop() else {
            return Ok(());
        };
        let Running {
            watch,
            lifetime_timer,
            relay,
            container,
            ..
        } = running;
        drop(lifetime_timer);
        close_sessions(&watch.runtime).await;
        drop(relay);
        container.remove(&watch.docker).await
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
