//! [`ScriptTool`]: a tool that is a script (or any executable) inside the sandbox.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::sandbox::{Command, UploadRequest};
use uniagent_core::{Deployment, Error, Result, Tool, ToolContext, ToolOutput, ToolSpec};

use super::session::{run_reporting_status, shell_quote, SessionOutcome};
use crate::toolbox::args::encode_base64;
use crate::toolbox::truncate::truncate_middle;

/// A tool implemented by an executable file uploaded into the sandbox.
///
/// The script is uploaded on first use to `<install_dir>/<tool name>` and run in the
/// trajectory's session as `<path> <base64 of the JSON arguments>`: one argument, never
/// needing quoting; decode it with `printf %s "$1" | base64 -d`. What the script prints is the
/// tool's output; exit code 0 means success, anything else failure. The exit code is printed
/// in-band after the output ([`report_status`](super::session::report_status)), so a server
/// that cannot read it does not turn a success into a failure.
///
/// ```no_run
/// # async fn demo(ctx: uniagent_core::ToolContext) -> uniagent_core::Result<()> {
/// use serde_json::json;
/// use uniagent_core::{Tool, ToolSpec};
/// use uniagent_tools::ScriptTool;
///
/// let script = br#"#!/bin/sh
/// # Arguments: base64 of {"pattern": "..."}; needs python3 in the sandbox for the JSON.
/// pattern=$(printf %s "$1" | base64 -d | python3 -c 'import json,sys; print(json.load(sys.stdin)["pattern"])')
/// grep -rn --include='*.py' -- "$pattern" . | head -50
/// "#;
/// let spec = ToolSpec::function("grep_python", "Search Python files for a pattern.", json!({
///     "type": "object",
///     "properties": {"pattern": {"type": "string", "description": "A grep pattern."}},
///     "required": ["pattern"]
/// }));
/// let tool = ScriptTool::new(spec, script.to_vec());
/// let out = tool.call(json!({"pattern": "def main"}), &ctx).await?;
/// println!("{}", out.content);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ScriptTool {
    spec: ToolSpec,
    script: Vec<u8>,
    /// Directory in the sandbox the script is uploaded to.
    pub install_dir: String,
    /// Upper bound of one run (the call's `ctx.timeout` applies too).
    pub timeout: Duration,
    /// Characters of output shown (head and tail kept).
    pub max_output_chars: usize,
}

impl ScriptTool {
    /// A tool with `spec` run by `script` (its bytes; start it with a `#!` line).
    pub fn new(spec: ToolSpec, script: Vec<u8>) -> Self {
        Self {
            spec,
            script,
            install_dir: "/tmp/uniagent-toolbox/scripts".into(),
            timeout: Duration::from_secs(300),
            max_output_chars: 30_000,
        }
    }

    /// The script's path in the sandbox.
    pub fn path(&self) -> String {
        format!(
            "{}/{}",
            self.install_dir.trim_end_matches('/'),
            self.spec.function.name
        )
    }

    /// Uploads the script and makes it executable.
    pub async fn install(&self, deployment: &dyn Deployment) -> Result<()> {
        let path = self.path();
        let staging = format!("{path}.{:016x}", fastrand::u64(..));
        deployment
            .upload(UploadRequest {
                data: self.script.clone(),
                target_path: staging.clone(),
                unzip: false,
            })
            .await?;
        let argv = [
            "sh",
            "-c",
            "chmod 755 \"$1\" && mv -f \"$1\" \"$2\"",
            "sh",
            staging.as_str(),
            path.as_str(),
        ];
        let response = deployment.execute(Command::argv(argv, Some(60.0))).await?;
        if response.exit_code != Some(0) {
            return Err(Error::Sandbox {
                backend: deployment.backend().to_owned(),
                message: format!("installing tool script {path} failed: {}", response.stderr),
                retryable: false,
                source: None,
            });
        }
        Ok(())
    }

    /// Whether a run failed because the script is not (yet) installed.
    ///
    /// The shell says so with exit code 126 or 127 and the script's path. The status is printed
    /// in-band ([`run_reporting_status`]); where even that is missing (the server lost the
    /// output) only the path is left: then the file system decides, so a script that ran is
    /// never run twice.
    async fn needs_install(
        &self,
        deployment: &dyn Deployment,
        outcome: &SessionOutcome,
    ) -> Result<bool> {
        let SessionOutcome::Completed { output, exit_code } = outcome else {
            return Ok(false);
        };
        let path = self.path();
        if !output.contains(&path) {
            return Ok(false);
        }
        match exit_code {
            Some(126 | 127) => Ok(true),
            Some(_) => Ok(false),
            None => {
                let argv = ["test", "-x", path.as_str()];
                let found = deployment.execute(Command::argv(argv, Some(60.0))).await?;
                Ok(found.exit_code != Some(0))
            }
        }
    }

    async fn run_once(
        &self,
        deployment: &dyn Deployment,
        ctx: &ToolContext,
        command: &str,
    ) -> Result<SessionOutcome> {
        run_reporting_status(
            deployment,
            &ctx.session,
            command,
            self.timeout.min(ctx.timeout),
        )
        .await
    }
}

#[async_trait]
impl Tool for ScriptTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let deployment = ctx.require_deployment(&self.spec.function.name)?.as_ref();
        let payload = serde_json::to_vec(&args).map_err(|e| Error::Internal {
            message: format!("encoding arguments: {e}"),
        })?;
        let path = self.path();
        let command = format!(
            "{} {}",
            shell_quote(&path),
            shell_quote(&encode_base64(&payload))
        );
        let mut outcome = self.run_once(deployment, ctx, &command).await?;
        if self.needs_install(deployment, &outcome).await? {
            self.install(deployment).await?;
            outcome = self.run_once(deployment, ctx, &command).await?;
        }
        Ok(match outcome {
            SessionOutcome::Completed { output, exit_code } => {
                let text = truncate_middle(output.trim_end(), self.max_output_chars).into_owned();
                let mut out = if exit_code == Some(0) {
                    ToolOutput::success(text)
                } else {
                    ToolOutput::failed(text)
                };
                out.metadata.insert("exit_code".into(), json!(exit_code));
                out
            }
            SessionOutcome::TimedOut => ToolOutput::timed_out(format!(
                "{} did not finish within {} seconds and was cancelled.",
                self.spec.function.name,
                self.timeout.min(ctx.timeout).as_secs_f64()
            )),
            SessionOutcome::Syntax { details } => ToolOutput::failed(details),
        })
    }
}
