//! The [`Deployment`] trait: one sandbox, its lifecycle and the operations inside it.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::protocol::*;
use crate::error::Result;

/// What a deployment backend supports, returned as data so that callers and the conformance
/// suite only exercise what is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Persistent bash sessions (`create_session`, `run_in_session`, `close_session`).
    pub sessions: bool,
    /// One-off processes (`execute`).
    pub execute: bool,
    /// `read_file` / `write_file`.
    pub files: bool,
    /// `upload` (single files and zip archives).
    pub upload: bool,
    /// Resource limits (memory, CPU, pids) are enforced.
    pub resource_limits: bool,
    /// The sandbox has no network unless enabled.
    pub network_isolation: bool,
}

impl Capabilities {
    /// Nothing claimed: the starting point for a backend that offers part of the protocol.
    pub const fn none() -> Self {
        Self {
            sessions: false,
            execute: false,
            files: false,
            upload: false,
            resource_limits: false,
            network_isolation: false,
        }
    }

    /// Everything the SWE-ReX protocol offers, without isolation guarantees.
    pub const fn full_protocol() -> Self {
        Self {
            sessions: true,
            execute: true,
            files: true,
            upload: true,
            resource_limits: false,
            network_isolation: false,
        }
    }
}

/// A sandbox: starts, health-checks and stops a runtime, and runs commands, bash sessions and
/// file operations inside it.
///
/// # Contract
/// - Methods take `&self`; implementations use interior mutability, so one deployment can be
///   shared (`Arc<dyn Deployment>`) by the tools of one trajectory.
/// - [`start`](Deployment::start) returns once the runtime answers `is_alive`. Calling an
///   operation before `start` or after `stop` returns an error, never panics.
/// - [`stop`](Deployment::stop) is idempotent and releases everything the deployment started
///   (processes, containers, remote instances). Implementations also release on `Drop`, so a
///   cancelled or panicking rollout leaks nothing.
/// - A command's non-zero exit code is data (`exit_code`), unless the request asked for
///   `check: raise`, in which case the error is [`Error::Runtime`](crate::Error::Runtime) with
///   class `NonZeroExitCode`. Runtime exceptions keep SWE-ReX's class paths.
/// - A command timeout is [`Error::Runtime`](crate::Error::Runtime) with class
///   `CommandTimeout`; the session stays usable afterwards.
/// - Transport failures are [`Error::Sandbox`](crate::Error::Sandbox) with `retryable` set when
///   a retry may help; backends retry those themselves with
///   [`RetryConfig`](crate::RetryConfig) where the operation is idempotent.
/// - Operations a backend lacks (see [`capabilities`](Deployment::capabilities)) return
///   [`Error::NotSupported`](crate::Error::NotSupported).
#[async_trait]
pub trait Deployment: Send + Sync + Debug + 'static {
    /// Backend name (`host`, `docker`, `remote`, `faas`, `scripted`).
    fn backend(&self) -> &str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Starts the sandbox and waits until its runtime is alive.
    async fn start(&self) -> Result<()>;

    /// Stops the sandbox and releases its resources. Idempotent.
    async fn stop(&self) -> Result<()>;

    /// Health check.
    async fn is_alive(&self) -> Result<IsAliveResponse>;

    /// Creates a bash session.
    async fn create_session(&self, request: CreateSessionRequest) -> Result<CreateSessionResponse>;

    /// Runs a command in (or interrupts) a session.
    async fn run_in_session(&self, action: Action) -> Result<BashObservation>;

    /// Closes a session and ends its processes.
    async fn close_session(&self, request: CloseSessionRequest) -> Result<CloseSessionResponse>;

    /// Runs a one-off process.
    async fn execute(&self, command: Command) -> Result<CommandResponse>;

    /// Reads a text file.
    async fn read_file(&self, request: ReadFileRequest) -> Result<ReadFileResponse>;

    /// Writes a text file (parents are created).
    async fn write_file(&self, request: WriteFileRequest) -> Result<()>;

    /// Places bytes (or an extracted zip archive) at a path.
    async fn upload(&self, request: UploadRequest) -> Result<()>;
}

macro_rules! forward_deployment {
    ($($ptr:tt)*) => {
        #[async_trait]
        impl<T: Deployment + ?Sized> Deployment for $($ptr)*<T> {
            fn backend(&self) -> &str { (**self).backend() }
            fn capabilities(&self) -> Capabilities { (**self).capabilities() }
            async fn start(&self) -> Result<()> { (**self).start().await }
            async fn stop(&self) -> Result<()> { (**self).stop().await }
            async fn is_alive(&self) -> Result<IsAliveResponse> { (**self).is_alive().await }
            async fn create_session(&self, r: CreateSessionRequest) -> Result<CreateSessionResponse> {
                (**self).create_session(r).await
            }
            async fn run_in_session(&self, a: Action) -> Result<BashObservation> {
                (**self).run_in_session(a).await
            }
            async fn close_session(&self, r: CloseSessionRequest) -> Result<CloseSessionResponse> {
                (**self).close_session(r).await
            }
            async fn execute(&self, c: Command) -> Result<CommandResponse> { (**self).execute(c).await }
            async fn read_file(&self, r: ReadFileRequest) -> Result<ReadFileResponse> {
                (**self).read_file(r).await
            }
            async fn write_file(&self, r: WriteFileRequest) -> Result<()> { (**self).write_file(r).await }
            async fn upload(&self, r: UploadRequest) -> Result<()> { (**self).upload(r).await }
        }
    };
}

forward_deployment!(Arc);
forward_deployment!(Box);

/// Conveniences over [`Deployment`], available on every implementation.
///
/// ```
/// # #[cfg(feature = "test-utils")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::time::Duration;
///
/// use uniagent_core::sandbox::{CreateSessionRequest, Deployment, DeploymentExt};
/// use uniagent_core::testing::ScriptedDeployment;
///
/// let sandbox = ScriptedDeployment::new().on_command("echo hi", "hi\n", 0);
/// sandbox.create_session(CreateSessionRequest::new("default")).await?;
/// let out = sandbox.bash("default", "echo hi", Duration::from_secs(10)).await?;
/// assert_eq!((out.output.as_str(), out.exit_code), ("hi\n", Some(0)));
/// # Ok(()) }
/// # #[cfg(not(feature = "test-utils"))] fn main() {}
/// ```
#[async_trait]
pub trait DeploymentExt: Deployment {
    /// Runs `command` in `session` with `check: silent` (the exit code is data) and a timeout.
    async fn bash(
        &self,
        session: &str,
        command: &str,
        timeout: Duration,
    ) -> Result<BashObservation> {
        self.run_in_session(Action::Bash(BashAction::new(
            session,
            command,
            Some(timeout.as_secs_f64()),
        )))
        .await
    }

    /// Runs a shell one-liner as a one-off process.
    async fn sh(&self, script: &str, timeout: Duration) -> Result<CommandResponse> {
        self.execute(Command::shell(script, Some(timeout.as_secs_f64())))
            .await
    }

    /// Reads a UTF-8 text file.
    async fn read_text(&self, path: &str) -> Result<String> {
        Ok(self.read_file(ReadFileRequest::new(path)).await?.content)
    }

    /// Writes a UTF-8 text file.
    async fn write_text(&self, path: &str, content: &str) -> Result<()> {
        self.write_file(WriteFileRequest {
            content: content.to_owned(),
            path: path.to_owned(),
        })
        .await
    }
}

impl<T: Deployment + ?Sized> DeploymentExt for T {}
