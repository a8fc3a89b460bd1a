//! `str_replace_editor`: the toolbox's editor, run inside the sandbox.

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::sandbox::UploadRequest;
use uniagent_core::{Result, Tool, ToolContext, ToolOutput, ToolSpec};

use super::session::{run_reporting_status, shell_quote, SessionOutcome};
use crate::install::{install_toolbox_with, ToolboxConfig};
use crate::toolbox::args::{encode_base64, EditorArgs};

/// Commands longer than this (bytes) pass their arguments through an uploaded file instead of
/// the command line, so that no terminal line limit is ever hit.
pub const INLINE_ARGS_LIMIT: usize = 3_000;

/// Views, creates and edits files in the sandbox through the uploaded `uniagent-toolbox`.
///
/// The toolbox is installed on first use in each sandbox (when running it reports "not
/// found") or ahead of time with [`install_toolbox_with`]; the edit history lives in the
/// sandbox, so undo works across calls and the tool itself holds no per-rollout state.
#[derive(Debug, Clone, Default)]
pub struct StrReplaceEditor {
    /// Where the toolbox lives in the sandbox and which binary to upload.
    pub toolbox: ToolboxConfig,
}

impl StrReplaceEditor {
    /// An editor using the toolbox at `config`.
    pub fn new(config: ToolboxConfig) -> Self {
        Self { toolbox: config }
    }

    /// The shell command that runs the editor with `args` (JSON), and the arguments file to
    /// upload first when the arguments are too large for the command line.
    pub fn command_for(&self, args_json: &[u8]) -> (String, Option<String>) {
        let prefix = format!(
            "UNIAGENT_TOOLBOX_STATE_DIR={} {} str_replace_editor",
            shell_quote(&self.toolbox.state_dir()),
            shell_quote(&self.toolbox.binary_path())
        );
        let encoded = encode_base64(args_json);
        if prefix.len() + encoded.len() < INLINE_ARGS_LIMIT {
            // The base64 alphabet needs no quoting; quoting anyway costs nothing.
            (format!("{prefix} {}", shell_quote(&encoded)), None)
        } else {
            let file = format!(
                "{}/args/{:016x}.json",
                self.toolbox.state_dir(),
                fastrand::u64(..)
            );
            (
                format!("{prefix} --args-file {}", shell_quote(&file)),
                Some(file),
            )
        }
    }

    fn toolbox_missing(&self, outcome: &SessionOutcome) -> bool {
        matches!(outcome, SessionOutcome::Completed { output, exit_code: Some(126 | 127) }
            if output.contains(&self.toolbox.binary_path()))
    }
}

#[async_trait]
impl Tool for StrReplaceEditor {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "str_replace_editor",
            "View, create and edit text files.\n\
             * `view` on a file shows it with line numbers (like `cat -n`); `view_range` [start, end] shows only \
             those lines (end -1 = to the end of the file). On a directory it lists files two levels deep, \
             skipping hidden ones.\n\
             * `create` writes `file_text` to a new file; it refuses to overwrite an existing file.\n\
             * `str_replace` replaces `old_str` with `new_str` (omit `new_str` to delete). `old_str` must match \
             exactly one place in the file, character for character including whitespace and indentation; \
             otherwise nothing changes and you are told how many places matched. Include enough context lines \
             to make it unique.\n\
             * `insert` inserts `new_str` AFTER line `insert_line` (0 inserts at the top of the file).\n\
             * `undo_edit` reverts the last edit made to the file; repeat it to go further back.\n\
             Paths must be absolute. Tabs, line endings and unicode are kept exactly. Binary files are refused.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
                        "description": "The operation."},
                    "path": {"type": "string", "description": "Absolute path of a file or directory, e.g. `/testbed/src/main.py`."},
                    "file_text": {"type": "string", "description": "Content of the new file (`create`)."},
                    "old_str": {"type": "string", "description": "The exact text to replace (`str_replace`)."},
                    "new_str": {"type": "string", "description": "The replacement (`str_replace`) or the text to insert (`insert`)."},
                    "insert_line": {"type": "integer", "description": "Insert after this line; 0 = at the top (`insert`)."},
                    "view_range": {"type": "array", "items": {"type": "integer"},
                        "description": "[start, end] line numbers, 1-based and inclusive; end -1 = to the end (`view` of a file)."}
                },
                "required": ["command", "path"]
            }),
        )
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        // Validate here too: bad arguments cost no round trip and read the same.
        if let Err(e) = EditorArgs::from_value(&args) {
            return Ok(ToolOutput::failed(format!("str_replace_editor: {e}")));
        }
        let deployment = ctx.require_deployment("str_replace_editor")?.as_ref();
        let args_json = serde_json::to_vec(&args).map_err(|e| uniagent_core::Error::Internal {
            message: format!("re-encoding tool arguments: {e}"),
        })?;
        let (command, args_file) = self.command_for(&args_json);
        if let Some(file) = args_file {
            let upload = UploadRequest {
                data: args_json.clone(),
                target_path: file,
                unzip: false,
            };
            deployment.upload(upload).await?;
        }
        let mut outcome =
            run_reporting_status(deployment, &ctx.session, &command, ctx.timeout).await?;
        if self.toolbox_missing(&outcome) {
            // The toolbox never ran, so an arguments file is still there for the retry.
            install_toolbox_with(deployment, &self.toolbox).await?;
            outcome = run_reporting_status(deployment, &ctx.session, &command, ctx.timeout).await?;
        }
        Ok(match outcome {
            SessionOutcome::Completed {
                output,
                exit_code: Some(0),
            } => ToolOutput::success(output),
            SessionOutcome::Completed { output, exit_code } => {
                let mut out = ToolOutput::failed(output);
                out.metadata.insert("exit_code".into(), json!(exit_code));
                out
            }
            SessionOutcome::TimedOut => ToolOutput::timed_out(format!(
                "str_replace_editor did not finish within {} seconds and was cancelled.",
                ctx.timeout.as_secs_f64()
            )),
            SessionOutcome::Syntax { details } => {
                ToolOutput::failed(format!("str_replace_editor could not run: {details}"))
            }
        })
    }
}
