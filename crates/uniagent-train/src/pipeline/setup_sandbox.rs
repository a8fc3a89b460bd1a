//! [`SetupSandbox`]: a sandbox whose start step also prepares the task (writes its files,
//! checks out its repository), so a `SandboxFactory` can hand the runner a ready workspace.

use async_trait::async_trait;
use uniagent_core::sandbox::{
    Action, BashObservation, CloseSessionRequest, CloseSessionResponse, Command, CommandResponse,
    CreateSessionRequest, CreateSessionResponse, IsAliveResponse, ReadFileRequest,
    ReadFileResponse, UploadRequest, WriteFileRequest,
};
use uniagent_core::{Capabilities, Deployment, DeploymentExt, Error, Result};

/// Wraps a sandbox: after it starts, `script` runs in it (`sh -c`, `timeout_s` seconds); a
/// non-zero exit fails the start, which the runner records as a sandbox error before the agent
/// acted (dropped from training, see `Trajectory::training_use`).
#[derive(Debug)]
pub struct SetupSandbox {
    inner: Box<dyn Deployment>,
    script: String,
    timeout_s: f64,
}

impl SetupSandbox {
    /// `inner`, prepared by `script` when it starts.
    pub fn new(inner: Box<dyn Deployment>, script: impl Into<String>, timeout_s: f64) -> Self {
        Self {
            inner,
            script: script.into(),
            timeout_s,
        }
    }
}

#[async_trait]
impl Deployment for SetupSandbox {
    fn backend(&self) -> &str {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn start(&self) -> Result<()> {
        self.inner.start().await?;
        let out = self.inner.sh(&self.script, self.timeout_s).await?;
        if out.exit_code != Some(0) {
            return Err(Error::internal(format!(
                "task setup exited with {:?}: {}",
                out.exit_code, out.stderr
            )));
        }
        Ok(())
    }
    async fn stop(&self) -> Result<()> {
        self.inner.stop().await
    }
    async fn is_alive(&self) -> Result<IsAliveResponse> {
        self.inner.is_alive().await
    }
    async fn create_session(&self, r: CreateSessionRequest) -> Result<CreateSessionResponse> {
        self.inner.create_session(r).await
    }
    async fn run_in_session(&self, a: Action) -> Result<BashObservation> {
        self.inner.run_in_session(a).await
    }
    async fn close_session(&self, r: CloseSessionRequest) -> Result<CloseSessionResponse> {
        self.inner.close_session(r).await
    }
    async fn execute(&self, c: Command) -> Result<CommandResponse> {
        self.inner.execute(c).await
    }
    async fn read_file(&self, r: ReadFileRequest) -> Result<ReadFileResponse> {
        self.inner.read_file(r).await
    }
    async fn write_file(&self, r: WriteFileRequest) -> Result<()> {
        self.inner.write_file(r).await
    }
    async fn upload(&self, r: UploadRequest) -> Result<()> {
        self.inner.upload(r).await
    }
}
