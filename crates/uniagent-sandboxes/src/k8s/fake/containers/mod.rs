//! The fake kubelet's Docker runtime ([`PodRunner::Docker`](super::PodRunner::Docker)): each pod
//! a container of its own image, as a node's container runtime would run it.
//!
//! The pod spec is read by [`plan`]; the container is created from the pod's image, the files of
//! its volumes (the server the init container installs, the ConfigMap's keys) are copied in
//! through the Docker API before it starts, and its ports are published on the pod's loopback
//! address, so that the address the fake reports as `podIP` reaches it as a pod IP would.
//! Readiness is the server's "listening" line in the container's output (a `tcpSocket` probe on
//! a published port would be answered by Docker's proxy before the server listens). Every
//! container carries the docker backend's labels under one run id per fake, so the fake removes
//! them all on shutdown and the docker reaper removes those of a killed process.

pub(crate) mod plan;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use bollard::Docker;
use futures::StreamExt;

use crate::docker::labels::container_labels;
use crate::docker::{engine, list_managed};

use self::plan::{ContainerPlan, FileSource};
use super::util::lock;

/// Deadline of one Docker request (create, upload, start, inspect, remove).
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a started container may take to print that its server listens.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long shutting the fake down waits for the daemon to remove its containers.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a pod's container did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StartFailure {
    /// The image is not on the node (a real kubelet would try to pull it; no registry here).
    ImageMissing(String),
    /// Anything else, as the container's `StartError` message.
    Other(String),
}

/// The containers of one fake.
#[derive(Debug)]
pub(crate) struct Containers {
    run_id: String,
    /// Created containers by id → pod (namespace, name).
    running: Mutex<HashMap<String, (String, String)>>,
    /// Whether a start ever began (a fake that never started one has nothing to sweep).
    started_any: AtomicBool,
    /// Containers started so far.
    started: AtomicU64,
}

impl Containers {
    /// The containers of the fake whose containers carry run id `run_id`.
    pub(crate) fn new(run_id: String) -> Self {
        Containers {
            run_id,
            running: Mutex::new(HashMap::new()),
            started_any: AtomicBool::new(false),
            started: AtomicU64::new(0),
        }
    }

    /// How many containers exist (created and not yet removed).
    pub(crate) fn count(&self) -> usize {
        lock(&self.running).len()
    }

    /// How many containers were started so far.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Creates the container of pod `namespace/name` from `plan`, copies its files in and starts
    /// it, with its ports published on `ip`; returns its id.
    pub(crate) async fn start(
        &self,
        pod: (&str, &str),
        plan: &ContainerPlan,
        ip: Ipv4Addr,
        server_binary: &Path,
    ) -> Result<String, StartFailure> {
        self.started_any.store(true, Ordering::SeqCst);
        let docker = engine()
            .await
            .map_err(|e| StartFailure::Other(e.to_string()))?;
        let archive = archive(&plan.files, server_binary).map_err(StartFailure::Other)?;
        let name = format!("uniagent-k8s-fake-{}-{}-{}", self.run_id, pod.0, pod.1);
        let created = within(
            "creating the container",
            docker.create_container(
                Some(bollard::query_parameters::CreateContainerOptions {
                    name: Some(name),
                    ..Default::default()
                }),
                body(plan, ip, &self.run_id),
            ),
        )
        .await
        .map_err(|e| match e {
            CallError::Docker(bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                message,
            }) => StartFailure::ImageMissing(message),
            other => StartFailure::Other(other.to_string()),
        })?;
        let id = created.id;
        lock(&self.running).insert(id.clone(), (pod.0.to_string(), pod.1.to_string()));
        let filled = async {
            within(
                "copying the volumes into the container",
                docker.upload_to_container(
                    &id,
                    Some(bollard::query_parameters::UploadToContainerOptions {
                        path: "/".into(),
                        ..Default::default()
                    }),
                    bollard::body_full(archive.into()),
                ),
            )
            .await?;
            within(
                "starting the container",
                docker.start_container(
                    &id,
                    None::<bollard::query_parameters::StartContainerOptions>,
                ),
            )
            .await
        };
        if let Err(e) = filled.await {
            self.remove(&id).await;
            return Err(StartFailure::Other(e.to_string()));
        }
        self.started.fetch_add(1, Ordering::Relaxed);
        Ok(id)
    }

    /// Waits until the server in container `id` prints that it listens; `Err` with the reason
    /// when the container stops first or the deadline passes.
    pub(crate) async fn wait_listening(&self, id: &str) -> Result<(), String> {
        let docker = engine().await.map_err(|e| e.to_string())?;
        crate::docker::startup::wait_until_listening(&docker, id, LISTEN_TIMEOUT)
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits for container `id` to exit; its exit code (137 when it was removed).
    pub(crate) async fn wait_exit(&self, id: &str) -> i32 {
        let Ok(docker) = engine().await else {
            return 137;
        };
        let mut waits = std::pin::pin!(
            docker.wait_container(id, None::<bollard::query_parameters::WaitContainerOptions>)
        );
        match waits.next().await {
            Some(Ok(exit)) => i32::try_from(exit.status_code).unwrap_or(137),
            // A non-zero exit arrives as an error carrying the code.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                i32::try_from(code).unwrap_or(137)
            }
            _ => 137,
        }
    }

    /// Removes container `id` (force; gone already is fine).
    pub(crate) async fn remove(&self, id: &str) {
        if let Ok(docker) = engine().await {
            if let Err(e) = crate::docker::reaper::remove_container(&docker, id).await {
                tracing::warn!(container = %id, error = %e, "k8s fake: could not remove a pod's container");
                return;
            }
        }
        lock(&self.running).remove(id);
    }

    /// Removes every container of this fake, also those not (yet) recorded, waiting at most
    /// [`SHUTDOWN_TIMEOUT`]; callable from `Drop`.
    pub(crate) fn remove_all(&self) {
        // Also with none recorded: a create may have been in flight.
        if !self.started_any.load(Ordering::SeqCst) {
            return;
        }
        let run_id = self.run_id.clone();
        crate::blocking::block_on_own_thread(async move {
            let removal = async {
                // A connection of this thread's runtime: the shared engine belongs to another.
                let docker = Docker::connect_with_local_defaults()
                    .map_err(|e| e.to_string())?
                    .negotiate_version()
                    .await
                    .map_err(|e| e.to_string())?;
                let left = list_managed(&docker, Some(&run_id))
                    .await
                    .map_err(|e| e.to_string())?;
                let removals = left
                    .iter()
                    .map(|c| crate::docker::reaper::remove_container(&docker, &c.id));
                for result in futures::future::join_all(removals).await {
                    result.map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            };
            match tokio::time::timeout(SHUTDOWN_TIMEOUT, removal).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "k8s fake: could not remove its containers")
                }
                Err(_) => tracing::warn!("k8s fake: removing its containers timed out"),
            }
        });
        lock(&self.running).clear();
    }
}

/// Why a Docker call failed.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{0}")]
    Docker(bollard::errors::Error),
    #[error("{0}: the Docker daemon did not answer within {1:?}")]
    Timeout(&'static str, Duration),
}

async fn within<T>(
    what: &'static str,
    call: impl std::future::Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result.map_err(CallError::Docker),
        Err(_) => Err(CallError::Timeout(what, CALL_TIMEOUT)),
    }
}

/// The create request: the plan's process, limits and ports on `ip`, labelled for `run_id`.
fn body(plan: &ContainerPlan, ip: Ipv4Addr, run_id: &str) -> ContainerCreateBody {
    let port_key = |p: u16| format!("{p}/tcp");
    let bindings = plan
        .ports
        .iter()
        .map(|&p| {
            (
                port_key(p),
                Some(vec![PortBinding {
                    host_ip: Some(ip.to_string()),
                    host_port: Some(p.to_string()),
                }]),
            )
        })
        .collect();
    ContainerCreateBody {
        image: Some(plan.image.clone()),
        entrypoint: plan.entrypoint.clone(),
        cmd: plan.cmd.clone(),
        working_dir: plan.working_dir.clone(),
        env: Some(plan.env.clone()),
        exposed_ports: Some(
            plan.ports
                .iter()
                .map(|&p| (port_key(p), HashMap::new()))
                .collect(),
        ),
        labels: Some(container_labels(run_id, None)),
        host_config: Some(HostConfig {
            memory: plan.memory_bytes,
            nano_cpus: plan.nano_cpus,
            port_bindings: Some(bindings),
            security_opt: plan
                .no_new_privileges
                .then(|| vec!["no-new-privileges".to_string()]),
            init: Some(true),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    }
}

/// A tar archive of the plan's files (with their directories), extracted at `/`.
fn archive(files: &[plan::PlannedFile], server_binary: &Path) -> Result<Vec<u8>, String> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut dirs = std::collections::BTreeSet::new();
    for file in files {
        let mut at = String::new();
        let parts: Vec<&str> = file.path.trim_start_matches('/').split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            at.push_str(part);
            at.push('/');
            if dirs.insert(at.clone()) {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder
                    .append_data(&mut header, &at, std::io::empty())
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    for file in files {
        let bytes = match &file.source {
            FileSource::Bytes(bytes) => bytes.clone(),
            FileSource::ServerBinary => std::fs::read(server_binary)
                .map_err(|e| format!("reading {}: {e}", server_binary.display()))?,
        };
        let mut header = tar::Header::new_gnu();
        header.set_mode(file.mode);
        header.set_size(bytes.len() as u64);
        builder
            .append_data(
                &mut header,
                file.path.trim_start_matches('/'),
                bytes.as_slice(),
            )
            .map_err(|e| e.to_string())?;
    }
    builder.into_inner().map_err(|e| e.to_string())
}
