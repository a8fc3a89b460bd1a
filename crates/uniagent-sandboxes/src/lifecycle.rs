//! The started/stopped state shared by deployments that talk to a server through a
//! [`RemoteRuntime`](crate::client::RemoteRuntime).

use uniagent_core::Error;

/// Where a deployment is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `start` was not called yet.
    New,
    /// Started and not stopped (only `remote` is in this phase: the `host`, `docker` and
    /// `faas` backends keep their running state apart).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Running,
    /// `stop` ran.
    Stopped,
}

/// A deployment that keeps its running state apart (`host`, `docker`): idle in a phase, or
/// running with `R`.
#[cfg(any(feature = "host", feature = "docker"))]
#[derive(Debug)]
pub(crate) enum State<R> {
    Idle(Phase),
    Running(Box<R>),
}

#[cfg(any(feature = "host", feature = "docker"))]
impl<R> State<R> {
    /// Marks the deployment stopped and hands back what was running, if anything.
    pub(crate) fn stop(&mut self) -> Option<R> {
        match std::mem::replace(self, State::Idle(Phase::Stopped)) {
            State::Running(running) => Some(*running),
            State::Idle(_) => None,
        }
    }
}

/// Closes the server's sessions first, so shells end their jobs the polite way; waits at most
/// two seconds, and a dead server is no error.
#[cfg(any(feature = "host", feature = "docker"))]
pub(crate) async fn close_sessions(runtime: &crate::client::RemoteRuntime) {
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), runtime.close()).await;
}

/// The error of an operation called outside [`Phase::Running`].
pub(crate) fn not_running(backend: &str, phase: Phase, operation: &str) -> Error {
    let why = match phase {
        Phase::New => "the deployment was not started",
        Phase::Stopped => "the deployment was stopped",
        Phase::Running => "the deployment is running",
    };
    Error::Sandbox {
        backend: backend.to_owned(),
        message: format!("cannot {operation}: {why}"),
        retryable: false,
        source: None,
    }
}

/// Implements [`Deployment`](uniagent_core::Deployment) for a type with inherent
/// `do_start`, `do_stop` and `runtime(operation) -> Result<RemoteRuntime>` methods: lifecycle
/// calls go to the former, every protocol operation to the client the latter returns.
#[cfg(any(
    feature = "host",
    feature = "remote",
    feature = "faas",
    feature = "k8s"
))]
macro_rules! impl_deployment_over_runtime {
    ($ty:ty, $backend:expr) => {
        #[async_trait::async_trait]
        impl uniagent_core::Deployment for $ty {
            fn backend(&self) -> &str {
                $backend
            }
            fn capabilities(&self) -> uniagent_core::Capabilities {
                uniagent_core::Capabilities::full_protocol()
            }
            async fn start(&self) -> Result<()> {
                self.do_start().await
            }
            async fn stop(&self) -> Result<()> {
                self.do_stop().await
            }
            async fn is_alive(&self) -> Result<IsAliveResponse> {
                self.runtime("is_alive").await?.is_alive(None).await
            }
            async fn create_session(
                &self,
                request: CreateSessionRequest,
            ) -> Result<CreateSessionResponse> {
                self.runtime("create_session")
                    .await?
                    .create_session(&request)
                    .await
            }
            async fn run_in_session(&self, action: Action) -> Result<BashObservation> {
                self.runtime("run_in_session")
                    .await?
                    .run_in_session(&action)
                    .await
            }
            async fn close_session(
                &self,
                request: CloseSessionRequest,
            ) -> Result<CloseSessionResponse> {
                self.runtime("close_session")
                    .await?
                    .close_session(&request)
                    .await
            }
            async fn execute(&self, command: Command) -> Result<CommandResponse> {
                self.runtime("execute").await?.execute(&command).await
            }
            async fn read_file(&self, request: ReadFileRequest) -> Result<ReadFileResponse> {
                self.runtime("read_file").await?.read_file(&request).await
            }
            async fn write_file(&self, request: WriteFileRequest) -> Result<()> {
                self.runtime("write_file").await?.write_file(&request).await
            }
            async fn upload(&self, request: UploadRequest) -> Result<()> {
                self.runtime("upload").await?.upload(request).await
            }
        }
    };
}

#[cfg(any(
    feature = "host",
    feature = "remote",
    feature = "faas",
    feature = "k8s"
))]
pub(crate) use impl_deployment_over_runtime;
