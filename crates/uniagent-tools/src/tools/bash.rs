//! `execute_bash`: a command in the trajectory's persistent bash session.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::{Result, Tool, ToolContext, ToolOutput, ToolSpec};

use super::session::{run_in_session, SessionOutcome};
use crate::toolbox::truncate::truncate_middle;

/// Shown when a command printed nothing.
pub const NO_OUTPUT: &str = "Your command ran successfully and did not produce any output.";

/// Runs shell commands in the persistent session: `cd`, exported variables and activated
/// virtual environments carry over between calls.
///
/// The per-call timeout is the smaller of [`ExecuteBash::timeout`] and the call's
/// `ctx.timeout` (which the loop keeps below the transport's deadline); a command that runs
/// longer is interrupted, the session is checked, and the model reads a timeout message with
/// status [`TimedOut`](uniagent_core::ToolStatus::TimedOut). Output keeps its head and tail
/// when longer than [`ExecuteBash::max_output_chars`]; terminal escape sequences are removed.
#[derive(Debug, Clone)]
pub struct ExecuteBash {
    /// Upper bound of one command's run time (at least [`ExecuteBash::MIN_TIMEOUT`]).
    pub timeout: Duration,
    /// Characters of output shown to the model (head and tail halves).
    pub max_output_chars: usize,
}

impl ExecuteBash {
    /// The shortest timeout a command gets: a shorter configured one is raised to it (a zero
    /// timeout would fail every call).
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);
}

impl Default for ExecuteBash {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
            max_output_chars: 30_000,
        }
    }
}

/// Removes ANSI CSI/OSC escape sequences and carriage returns.
pub fn clean_terminal_output(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                Some('[') => {
                    chars.next();
                    // Parameters and intermediates, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    // OSC: until BEL or ESC \.
                    chars.next();
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// The message a timed-out command produces.
pub fn timeout_message(command: &str, timeout: Duration) -> String {
    format!(
        "The command '{command}' was cancelled because it took more than {} seconds. Please try a different command \
         that completes more quickly. Note: A common source of this error is if the command is interactive or requires \
         user input (it is impossible to receive user input in the current environment, so the command will never \
         complete).",
        timeout.as_secs_f64()
    )
}

#[async_trait]
impl Tool for ExecuteBash {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "execute_bash",
            "Run a bash command in the sandbox's terminal and see its output (stdout and stderr together).\n\
             * The shell is persistent: the working directory, exported variables and activated environments carry \
             over to the next call.\n\
             * Commands cannot read input: use non-interactive flags (`-y`, `--no-pager`) and avoid editors and pagers.\n\
             * Long-running commands are cancelled after a timeout; run servers in the background with output \
             redirected to a file (`cmd > log.txt 2>&1 &`).\n\
             * Long outputs are clipped in the middle; redirect them to a file and use `head`, `tail` or `grep`.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash command to run; may span several lines."}
                },
                "required": ["command"]
            }),
        )
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let Some(command) = args.get("command").and_then(Value::as_str) else {
            return Ok(ToolOutput::failed(
                "execute_bash needs a string parameter `command`.",
            ));
        };
        if command.trim().is_empty() {
            return Ok(ToolOutput::failed(
                "The `command` parameter is empty; give a bash command to run.",
            ));
        }
        let deployment = ctx.require_deployment("execute_bash")?;
        let timeout = self.timeout.max(Self::MIN_TIMEOUT).min(ctx.timeout);
        match run_in_session(deployment.as_ref(), &ctx.session, command, timeout).await? {
            SessionOutcome::TimedOut => Ok(ToolOutput::timed_out(timeout_message(command, timeout))),
            SessionOutcome::Syntax { details } => Ok(ToolOutput::failed(format!(
                "Your bash command contained syntax errors and was NOT executed. Please fix the syntax errors and try \
                 again. This can be the result of not adhering to the syntax for multi-line commands. Here is the \
                 output of `bash -n`:\n{details}"
            ))),
            SessionOutcome::Completed { output, exit_code } => {
                let trimmed = output.trim_end();
                let mut content = if trimmed.trim().is_empty() {
                    NO_OUTPUT.to_owned()
                } else {
                    truncate_middle(trimmed, self.max_output_chars).into_owned()
                };
                match exit_code {
                    Some(0) => {}
                    Some(code) => content.push_str(&format!("\n[exit code: {code}]")),
                    None => content.push_str("\n[exit code: unknown]"),
                }
                let mut out = ToolOutput::success(content);
                out.metadata.insert("exit_code".into(), json!(exit_code));
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_carriage_returns_go() {
        assert_eq!(
            clean_terminal_output("\u{1b}[1;31mred\u{1b}[0m\r\n50%\r100%"),
            "red\n50%100%"
        );
        assert_eq!(
            clean_terminal_output("\u{1b}]0;title\u{7}ok \u{1b}]2;t\u{1b}\\é"),
            "ok é"
        );
        assert_eq!(clean_terminal_output("\u{1b}"), "");
    }

    mod with_a_scripted_sandbox {
        use std::sync::Arc;

        use uniagent_core::sandbox::CreateSessionRequest;
        use uniagent_core::testing::ScriptedDeployment;
        use uniagent_core::{Deployment, Task, ToolStatus};

        use super::*;

        async fn ctx(sandbox: ScriptedDeployment) -> ToolContext {
            sandbox
                .create_session(CreateSessionRequest::new("s"))
                .await
                .unwrap();
            ToolContext {
                deployment: Some(Arc::new(sandbox) as Arc<dyn Deployment>),
                session: "s".into(),
                timeout: Duration::from_secs(7),
                task: Arc::new(Task::new("t", vec![])),
                call_id: "c".into(),
                rollout_id: "t:0".into(),
            }
        }

        #[tokio::test]
        async fn a_timeout_probes_the_session_and_reports_timed_out() {
            let sandbox = ScriptedDeployment::new()
                .on_command_timeout("sleep 99")
                .on_command("echo uniagent-session-alive", "uniagent-session-alive\n", 0);
            let ctx = ctx(sandbox.clone()).await;
            let out = ExecuteBash::default()
                .call(json!({"command": "sleep 99"}), &ctx)
                .await
                .unwrap();
            assert_eq!(out.status, ToolStatus::TimedOut);
            assert!(
                out.content.contains("took more than 7 seconds"),
                "{}",
                out.content
            );
            assert!(sandbox
                .log()
                .iter()
                .any(|l| l.contains("echo uniagent-session-alive")));
        }

        #[tokio::test]
        async fn a_session_that_stays_dead_is_an_infrastructure_error() {
            let sandbox = ScriptedDeployment::new().on_command_timeout("sleep 99");
            let ctx = ctx(sandbox).await;
            let err = ExecuteBash::default()
                .call(json!({"command": "sleep 99"}), &ctx)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("did not recover"), "{err}");
        }

        #[tokio::test]
        async fn bad_arguments_are_failed_outputs() {
            let ctx = ctx(ScriptedDeployment::new()).await;
            for args in [json!({}), json!({"command": 3}), json!({"command": "  "})] {
                let out = ExecuteBash::default().call(args, &ctx).await.unwrap();
                assert_eq!(out.status, ToolStatus::Failed);
            }
        }
    }
}
