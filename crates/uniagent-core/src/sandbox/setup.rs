//! [`SetupSandbox`]: a sandbox whose start also prepares the task's workspace, and [`Setup`],
//! the layer that puts it on.

use std::time::Duration;

use async_trait::async_trait;

use super::deployment::{Capabilities, Deployment, DeploymentExt};
use super::protocol::*;
use crate::error::{Error, Result};
use crate::layer::Layer;

/// Bytes of a failed setup command's output kept in the error.
const ERROR_DETAIL_BYTES: usize = 2000;

/// Wraps a sandbox: after it starts, each setup command runs in it in order (`sh -c`, each
/// within `timeout`); a non-zero exit fails the start with the command and the tail of its
/// output, which a runner records as a sandbox error before the agent acted. Everything else is
/// the inner sandbox's.
///
/// ```
/// # #[cfg(feature = "test-utils")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::time::Duration;
///
/// use uniagent_core::sandbox::{Deployment, SetupSandbox};
/// use uniagent_core::testing::ScriptedDeployment;
///
/// let inner = ScriptedDeployment::new().on_command("git checkout v1", "", 0);
/// let sandbox = SetupSandbox::new(Box::new(inner.clone()), ["git checkout v1"], Duration::from_secs(60));
/// sandbox.start().await?;
/// assert!(inner.log().contains(&"execute: git checkout v1".to_owned()));
///
/// let failing = SetupSandbox::new(Box::new(ScriptedDeployment::new()), ["make"], Duration::from_secs(60));
/// let err = failing.start().await.unwrap_err();
/// assert!(err.to_string().contains("setup command `make` exited with Some(127)"));
/// # Ok(()) }
/// # #[cfg(not(feature = "test-utils"))] fn main() {}
/// ```
#[derive(Debug)]
pub struct SetupSandbox {
    inner: Box<dyn Deployment>,
    commands: Vec<String>,
    timeout: Duration,
}

impl SetupSandbox {
    /// `inner`, prepared by `commands` (in order) when it starts.
    pub fn new(
        inner: Box<dyn Deployment>,
        commands: impl IntoIterator<Item = impl Into<String>>,
        timeout: Duration,
    ) -> Self {
        Self {
            inner,
            commands: commands.into_iter().map(Into::into).collect(),
            timeout,
        }
    }
}

/// The [`Layer`] that prepares a sandbox with setup commands when it starts
/// ([`SetupSandbox`]); without commands it leaves the sandbox as it is.
///
/// ```
/// # #[cfg(feature = "test-utils")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use std::time::Duration;
///
/// use uniagent_core::layer::With;
/// use uniagent_core::sandbox::{Deployment, Setup};
/// use uniagent_core::testing::ScriptedDeployment;
///
/// let inner = ScriptedDeployment::new().on_command("make", "", 0);
/// let setup = Setup::new(["make"], Duration::from_secs(60));
/// let sandbox: Box<dyn Deployment> = Box::new(inner.clone());
/// sandbox.with(&setup).start().await?;
/// assert!(inner.log().contains(&"execute: make".to_owned()));
/// # Ok(()) }
/// # #[cfg(not(feature = "test-utils"))] fn main() {}
/// ```
#[derive(Debug, Clone)]
pub struct Setup {
    commands: Vec<String>,
    timeout: Duration,
}

impl Setup {
    /// `commands` (in order, each within `timeout`) when the sandbox starts.
    pub fn new(commands: impl IntoIterator<Item = impl Into<String>>, timeout: Duration) -> Self {
        Self {
            commands: commands.into_iter().map(Into::into).collect(),
            timeout,
        }
    }
}

impl Layer<Box<dyn Deployment>> for Setup {
    fn wrap(&self, inner: Box<dyn Deployment>) -> Box<dyn Deployment> {
        if self.commands.is_empty() {
            return inner;
        }
        Box::new(SetupSandbox::new(
            inner,
            self.commands.clone(),
            self.timeout,
        ))
    }
}

/// The last [`ERROR_DETAIL_BYTES`] of `text`, cut at a character boundary.
fn tail(text: &str) -> &str {
    let mut cut = text.len().saturating_sub(ERROR_DETAIL_BYTES);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    &text[cut..]
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
        for command in &self.commands {
            let out = self.inner.sh(command, self.timeout).await?;
            if out.exit_code != Some(0) {
                let output = format!("{}{}", out.stdout, out.stderr);
                return Err(Error::invalid_input(format!(
                    "setup command `{command}` exited with {:?}: {}",
                    out.exit_code,
                    tail(&output).trim()
                )));
            }
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

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn the_tail_is_cut_at_a_character_boundary() {
        let text = format!("{}{}", "é".repeat(1500), "end");
        let kept = tail(&text);
        assert!(kept.len() <= 2001 && kept.ends_with("end"));
        assert_eq!(tail("short"), "short");
    }
}
