//! The built-in tools on the host sandbox (`HostDeployment` running our `uniagent-sandbox`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: panics are failures

mod scenarios;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use uniagent_core::sandbox::*;
use uniagent_core::{Deployment, Result, Tool, ToolSpec};
use uniagent_sandboxes::{HostConfig, HostDeployment};
use uniagent_tools::ScriptTool;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_pass_the_scenarios_on_the_host_sandbox() {
    let server = match uniagent_sandboxes::host::find_server_binary(None) {
        Ok(path) => path,
        // `cargo test --workspace` builds the server next to this test; `-p uniagent-tools` may not.
        Err(e) if std::env::var_os("UNIAGENT_SWEREX_VENV").is_none() => {
            eprintln!("SKIPPED: {e} (build it with `cargo build -p uniagent-sandboxes --features server --bin uniagent-sandbox`)");
            return;
        }
        Err(e) => {
            panic!("scripts/test builds the whole workspace, so the server must be there: {e}")
        }
    };
    let work = tempfile::tempdir().unwrap();
    let config = HostConfig {
        server_binary: Some(server),
        ..HostConfig::default()
    };
    let deployment: Arc<dyn Deployment> = Arc::new(HostDeployment::new(config));
    deployment.start().await.unwrap();
    scenarios::run_all(deployment.clone(), work.path()).await;
    deployment.stop().await.unwrap();
}

/// A server whose prompt always comes back late, as SWE-ReX's does on a loaded machine: it waits
/// 0.1 s for the prompt after reading the exit code, then answers `exit_code: None` with the
/// prompt of the line it sent first still in the output. Everything else is the real sandbox.
#[derive(Debug)]
struct LatePrompts(Arc<dyn Deployment>);

#[async_trait::async_trait]
impl Deployment for LatePrompts {
    fn backend(&self) -> &str {
        self.0.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn start(&self) -> Result<()> {
        self.0.start().await
    }
    async fn stop(&self) -> Result<()> {
        self.0.stop().await
    }
    async fn is_alive(&self) -> Result<IsAliveResponse> {
        self.0.is_alive().await
    }
    async fn create_session(&self, r: CreateSessionRequest) -> Result<CreateSessionResponse> {
        self.0.create_session(r).await
    }
    async fn run_in_session(&self, a: Action) -> Result<BashObservation> {
        let mut observation = self.0.run_in_session(a).await?;
        observation.exit_code = None;
        observation.output.push_str("\nSHELLPS1PREFIX");
        Ok(observation)
    }
    async fn close_session(&self, r: CloseSessionRequest) -> Result<CloseSessionResponse> {
        self.0.close_session(r).await
    }
    async fn execute(&self, c: Command) -> Result<CommandResponse> {
        self.0.execute(c).await
    }
    async fn read_file(&self, r: ReadFileRequest) -> Result<ReadFileResponse> {
        self.0.read_file(r).await
    }
    async fn write_file(&self, r: WriteFileRequest) -> Result<()> {
        self.0.write_file(r).await
    }
    async fn upload(&self, r: UploadRequest) -> Result<()> {
        self.0.upload(r).await
    }
}

/// A started host sandbox (`None`, skipping, without a server binary) and the same sandbox
/// behind [`LatePrompts`].
async fn late_prompting_host() -> Option<(Arc<dyn Deployment>, Arc<dyn Deployment>)> {
    let Ok(server) = uniagent_sandboxes::host::find_server_binary(None) else {
        eprintln!("SKIPPED: no uniagent-sandbox binary (see the first test)");
        return None;
    };
    let host: Arc<dyn Deployment> = Arc::new(HostDeployment::new(HostConfig {
        server_binary: Some(server),
        ..HostConfig::default()
    }));
    host.start().await.unwrap();
    let late: Arc<dyn Deployment> = Arc::new(LatePrompts(host.clone()));
    Some((host, late))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_tools_install_themselves_when_the_server_reports_no_exit_code() {
    let Some((host, deployment)) = late_prompting_host().await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    deployment
        .create_session(CreateSessionRequest::new(scenarios::SESSION))
        .await
        .unwrap();
    let ctx = scenarios::context(deployment.clone(), Duration::from_secs(30));
    let spec = |name: &str| ToolSpec::function(name, "A test script.", json!({"type": "object"}));
    let install_dir = work.path().join("scripts").to_str().unwrap().to_owned();

    // Not installed: "No such file or directory" names the path, the file system confirms.
    let mut hello = ScriptTool::new(spec("hello"), b"#!/bin/sh\necho hello\n".to_vec());
    hello.install_dir = install_dir.clone();
    let out = hello.call(json!({}), &ctx).await.unwrap();
    assert_eq!(out.content, "hello");

    // Installed, failing, printing its own path: it ran, so it is not run again.
    let runs = work.path().join("runs");
    let script = format!(
        "#!/bin/sh\necho ran >> '{}'\necho \"$0 failed\"\nexit 1\n",
        runs.display()
    );
    let mut failing = ScriptTool::new(spec("failing"), script.into_bytes());
    failing.install_dir = install_dir;
    failing.install(host.as_ref()).await.unwrap();
    let out = failing.call(json!({}), &ctx).await.unwrap();
    assert!(out.content.ends_with("/failing failed"), "{}", out.content);
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "ran\n");
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_and_script_tools_pass_their_scenarios_when_every_prompt_comes_back_late() {
    let Some((host, deployment)) = late_prompting_host().await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    scenarios::run_own_command_tools(deployment, work.path()).await;
    host.stop().await.unwrap();
}
