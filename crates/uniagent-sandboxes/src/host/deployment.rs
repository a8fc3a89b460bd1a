//! The `host` backend's deployment (feature `host`).

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;
use uniagent_core::sandbox::*;
use uniagent_core::{Error, Result, RetryConfig};

use crate::client::{RemoteRuntime, RemoteRuntimeOptions};
use crate::config::HostConfig;
use crate::lifecycle::{close_sessions, impl_deployment_over_runtime, not_running, Phase};

type State = crate::lifecycle::State<Running>;
use super::process::{Launch, ServerProcess};
use super::{find_server_binary, sweep_orphaned_instances};

const BACKEND: &str = "host";
/// Spawn attempts when the chosen port was taken between probing and binding.
const PORT_ATTEMPTS: usize = 3;

/// The sandbox server as a local child process.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use std::time::Duration;
///
/// use uniagent_core::{Deployment, DeploymentExt};
/// use uniagent_sandboxes::{HostConfig, HostDeployment};
///
/// let sandbox = HostDeployment::new(HostConfig::default());
/// sandbox.start().await?;
/// assert_eq!(sandbox.sh("echo hi", Duration::from_secs(10)).await?.stdout, "hi\n");
/// sandbox.stop().await?; // also happens on drop
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct HostDeployment {
    config: HostConfig,
    state: Mutex<State>,
}

/// Field order matters: the process is killed before the directory is removed.
#[derive(Debug)]
struct Running {
    runtime: RemoteRuntime,
    process: ServerProcess,
    instance: Instance,
}

/// The instance directory; removed on drop unless kept.
#[derive(Debug)]
struct Instance {
    root: Option<tempfile::TempDir>,
    kept: PathBuf,
}

impl Instance {
    fn path(&self) -> &std::path::Path {
        self.root.as_ref().map_or(self.kept.as_path(), |d| d.path())
    }
}

/// Where a running host deployment lives, for inspection and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// The server's base URL (`http://127.0.0.1:<port>`).
    pub url: String,
    /// The server's process id, which is also its process group id.
    pub pid: u32,
    /// The server's working directory.
    pub work_dir: PathBuf,
    /// The value of [`INSTANCE_ENV`](super::INSTANCE_ENV) inherited by every process of this deployment.
    pub instance_id: String,
}

impl HostDeployment {
    /// A deployment that will start the server described by `config`.
    pub fn new(config: HostConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::Idle(Phase::New)),
        }
    }

    /// Where the running server is; `None` unless started.
    pub async fn info(&self) -> Option<HostInfo> {
        match &*self.state.lock().await {
            State::Running(r) => Some(HostInfo {
                url: r.runtime.url().to_owned(),
                pid: r.process.pid().unwrap_or_default(),
                work_dir: r.instance.path().join("work"),
                instance_id: r.process.instance_id().to_owned(),
            }),
            State::Idle(_) => None,
        }
    }

    async fn runtime(&self, operation: &str) -> Result<RemoteRuntime> {
        match &*self.state.lock().await {
            State::Running(r) => Ok(r.runtime.clone()),
            State::Idle(phase) => Err(not_running(BACKEND, *phase, operation)),
        }
    }

    async fn launch(&self) -> Result<Running> {
        // Once per process: leftovers of deployments whose owner was SIGKILLed.
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| {
            let killed = sweep_orphaned_instances();
            if killed > 0 {
                tracing::info!(killed, "removed processes of orphaned host deployments");
            }
        });
        let binary = find_server_binary(self.config.server_binary.as_deref())?;
        let root = match &self.config.work_root {
            Some(dir) => tempfile::Builder::new()
                .prefix("uniagent-host-")
                .tempdir_in(dir),
            None => tempfile::Builder::new().prefix("uniagent-host-").tempdir(),
        }
        .map_err(|e| Error::io("creating the host deployment's directory", e))?;
        let (work_dir, home_dir) = (root.path().join("work"), root.path().join("home"));
        for dir in [&work_dir, &home_dir] {
            std::fs::create_dir(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        let token = crate::secret::random_hex(16)?;
        let instance_id = crate::secret::random_hex(8)?;
        let log_file = root.path().join("server.log");
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_loopback_port()?;
            let launch = Launch {
                binary: &binary,
                port,
                token: &token,
                work_dir: &work_dir,
                home_dir: &home_dir,
                log_file: &log_file,
                instance_id: &instance_id,
                env: &self.config.env,
            };
            let mut process = ServerProcess::spawn(&launch)?;
            let options = RemoteRuntimeOptions {
                backend: BACKEND.into(),
                retry: RetryConfig::none(),
                ..RemoteRuntimeOptions::default()
            };
            let runtime = RemoteRuntime::new(
                &format!("http://127.0.0.1:{port}"),
                Some(token.clone()),
                options,
            )?;
            match wait_until_alive(&runtime, &mut process, self.config.startup_timeout).await {
                Ok(()) => {
                    let runtime = RemoteRuntime::new(
                        runtime.url(),
                        Some(token.clone()),
                        RemoteRuntimeOptions {
                            backend: BACKEND.into(),
                            ..RemoteRuntimeOptions::default()
                        },
                    )?;
                    let instance = if self.config.keep_work_dir {
                        Instance {
                            kept: root.keep(),
                            root: None,
                        }
                    } else {
                        Instance {
                            kept: root.path().to_path_buf(),
                            root: Some(root),
                        }
                    };
                    return Ok(Running {
                        runtime,
                        process,
                        instance,
                    });
                }
                Err(StartFailure::PortTaken(e)) => last_error = Some(e),
                Err(StartFailure::Fatal(e)) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::internal("no start attempt was made")))
    }
}

enum StartFailure {
    PortTaken(Error),
    Fatal(Error),
}

/// Probes `is_alive` (1 ms doubling to 50 ms between probes) until it answers, the process
/// exits, or `timeout` passes. The process is killed (by drop) on failure.
async fn wait_until_alive(
    runtime: &RemoteRuntime,
    process: &mut ServerProcess,
    timeout: Duration,
) -> std::result::Result<(), StartFailure> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = process.exited() {
            let log = process.log_tail();
            let error = Error::Sandbox {
                backend: BACKEND.into(),
                message: format!(
                    "the sandbox server exited during startup ({status}); its output:\n{log}"
                ),
                retryable: false,
                source: None,
            };
            let taken = log.contains("in use") || log.contains("AddrInUse");
            return Err(if taken {
                StartFailure::PortTaken(error)
            } else {
                StartFailure::Fatal(error)
            });
        }
        let probe = Duration::from_millis(500)
            .min(timeout.saturating_sub(start.elapsed()))
            .max(Duration::from_millis(20));
        match runtime.is_alive(Some(probe)).await {
            Ok(answer) if answer.is_alive => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(StartFailure::Fatal(e)),
        }
        if start.elapsed() >= timeout {
            return Err(StartFailure::Fatal(Error::Timeout {
                operation: format!(
                    "starting the sandbox server (output so far:\n{})",
                    process.log_tail()
                ),
                after: timeout,
            }));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// A port that was free on 127.0.0.1 a moment ago.
fn free_loopback_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::io("finding a free loopback port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("finding a free loopback port", e))?
        .port();
    Ok(port)
}

impl HostDeployment {
    /// Starts the server unless it runs already. Cancelling this future kills what it started.
    async fn do_start(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        if matches!(*state, State::Running(_)) {
            return Ok(());
        }
        let running = self.launch().await?;
        *state = State::Running(Box::new(running));
        Ok(())
    }

    /// Closes the sessions, stops the server's process group, kills leftovers and removes the
    /// instance directory. Idempotent.
    async fn do_stop(&self) -> Result<()> {
        let Some(running) = self.state.lock().await.stop() else {
            return Ok(());
        };
        let Running {
            runtime,
            process,
            instance,
        } = running;
        close_sessions(&runtime).await;
        process.stop().await;
        drop(instance);
        Ok(())
    }
}

impl_deployment_over_runtime!(HostDeployment, BACKEND);
