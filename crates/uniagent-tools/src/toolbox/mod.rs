//! The in-sandbox toolbox: the logic of the `uniagent-toolbox` multi-call binary, as a library.
//!
//! The binary is uploaded into the sandbox (see [`install_toolbox`](crate::install_toolbox))
//! and runs there, so tools see exactly the sandbox's files and permissions. It needs nothing
//! in the sandbox — no Python, no shell utilities — and builds statically
//! (`scripts/build-static-toolbox.sh`).
//!
//! # Invocation format
//! ```text
//! uniagent-toolbox str_replace_editor <base64 of the JSON arguments>
//! uniagent-toolbox str_replace_editor --args-file <path of a file holding the JSON arguments>
//! uniagent-toolbox truncate <max characters>
//! uniagent-toolbox --version | --help
//! ```
//! The JSON arguments are exactly the object the model emitted for the tool (for the editor:
//! `command`, `path`, `file_text`, `old_str`, `new_str`, `insert_line`, `view_range`). They are
//! base64-encoded (standard alphabet, padded), whose characters are never special to a shell,
//! so no content — quotes, newlines, `$`, backticks, NUL-free binary junk — can break the
//! command line. Payloads too large for one command line are uploaded to a file instead and
//! passed with `--args-file`; the toolbox deletes that file after reading it. A link named
//! `str_replace_editor` (or `truncate`) to the binary runs that subcommand directly.
//!
//! The environment variable `UNIAGENT_TOOLBOX_STATE_DIR` says where edit histories live
//! (default [`DEFAULT_STATE_DIR`]); see [`history`] for the layout.
//!
//! Output goes to stdout. Exit codes: 0 success, 1 the command was refused or failed (the
//! message says why and is meant for the model), 2 the command line or the arguments could
//! not be decoded.

pub mod args;
pub mod editor;
pub mod history;
pub mod truncate;

use std::path::PathBuf;

use args::{parse_command_line, EditorArgs, Invocation, Payload, USAGE};
use history::History;

/// Where edit histories live when `UNIAGENT_TOOLBOX_STATE_DIR` is unset.
pub const DEFAULT_STATE_DIR: &str = "/tmp/uniagent-toolbox/state";

/// The toolbox's version, printed by `--version`.
pub const VERSION: &str = concat!("uniagent-toolbox ", env!("CARGO_PKG_VERSION"));

/// What one toolbox run prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Text for stdout.
    pub output: String,
    /// Process exit code.
    pub exit_code: i32,
}

impl Outcome {
    fn ok(output: String) -> Self {
        Self {
            output,
            exit_code: 0,
        }
    }
}

/// Runs the toolbox for a command line (`argv[0]` included), with `stdin` read lazily by the
/// subcommands that need it and `state_dir` holding the edit histories.
///
/// ```
/// use uniagent_tools::toolbox::{args::encode_base64, run};
/// let dir = tempfile::tempdir()?;
/// let file = dir.path().join("a.txt");
/// let args = serde_json::json!({"command": "create", "path": file, "file_text": "x\n"}).to_string();
/// let argv = ["uniagent-toolbox".to_owned(), "str_replace_editor".into(), encode_base64(args.as_bytes())];
/// let outcome = run(&argv, &mut std::io::empty(), dir.path().join("state"));
/// assert_eq!(outcome.exit_code, 0, "{}", outcome.output);
/// assert_eq!(std::fs::read(&file)?, b"x\n");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run<S: AsRef<str>>(
    argv: &[S],
    stdin: &mut dyn std::io::Read,
    state_dir: PathBuf,
) -> Outcome {
    let usage_error = |message: String| Outcome {
        output: message,
        exit_code: 2,
    };
    let invocation = match parse_command_line(argv) {
        Ok(invocation) => invocation,
        Err(e) => return usage_error(format!("uniagent-toolbox: {e}")),
    };
    match invocation {
        Invocation::Version => Outcome::ok(format!("{VERSION}\n")),
        Invocation::Help => Outcome::ok(format!("{USAGE}\n")),
        Invocation::Truncate { max_chars } => {
            let mut bytes = Vec::new();
            if let Err(e) = stdin.read_to_end(&mut bytes) {
                return Outcome {
                    output: format!("truncate: cannot read stdin: {e}"),
                    exit_code: 1,
                };
            }
            let text = String::from_utf8_lossy(&bytes);
            Outcome::ok(truncate::truncate_middle(&text, max_chars).into_owned())
        }
        Invocation::Editor(payload) => {
            let decoded = match payload {
                Payload::Base64(text) => EditorArgs::from_base64(&text),
                Payload::File(path) => match std::fs::read(&path) {
                    Ok(bytes) => {
                        let _ = std::fs::remove_file(&path);
                        EditorArgs::from_json(&bytes)
                    }
                    Err(e) => {
                        return usage_error(format!(
                            "str_replace_editor: cannot read the arguments file {path}: {e}"
                        ))
                    }
                },
            };
            match decoded {
                Err(e) => usage_error(format!("str_replace_editor: {e}")),
                Ok(args) => match editor::run_editor(&args, &History::new(state_dir)) {
                    Ok(output) => Outcome::ok(output),
                    Err(e) => Outcome {
                        output: e.message,
                        exit_code: 1,
                    },
                },
            }
        }
    }
}

/// The state directory: `UNIAGENT_TOOLBOX_STATE_DIR`, else [`DEFAULT_STATE_DIR`].
pub fn state_dir_from_env() -> PathBuf {
    std::env::var_os("UNIAGENT_TOOLBOX_STATE_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| DEFAULT_STATE_DIR.into(), PathBuf::from)
}
