//! `str_replace_editor`: view, create and edit text files byte-exactly, with undo.
//!
//! Avoids the faults of Uni-Agent's Python editor: `create` never
//! overwrites, tabs are never expanded, `insert` inserts *after* `insert_line` (0 = top), the
//! history survives across runs so `undo_edit` works, a missing path is an error, and every
//! refusal is an error (exit code 1), not a success.

mod edit;
pub mod text;
mod view;

use std::fmt;
use std::path::Path;

use super::args::{EditorArgs, EditorCommand};
use super::history::History;

/// Lines of context shown around an edit.
pub const SNIPPET_LINES: usize = 4;

/// The most characters `view` prints before clipping.
pub const MAX_RESPONSE_LEN: usize = 16_000;

/// Appended when `view` clips a file.
pub const TRUNCATED_NOTE: &str = "<response clipped><NOTE>To save on context only part of this file has been shown \
    to you. You should retry this tool after you have searched inside the file with `grep -n` in order to find the \
    line numbers of what you are looking for, then view those lines with `view_range`.</NOTE>";

/// A refusal or failure the model should read (exit code 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditorError {
    /// The message.
    pub message: String,
}

impl EditorError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    fn io(action: &str, path: &str, e: &std::io::Error) -> Self {
        Self::new(format!("Failed to {action} {path}: {e}"))
    }
}

impl fmt::Display for EditorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EditorError {}

/// Runs one editor command and returns what to show the model.
///
/// ```
/// use uniagent_tools::toolbox::{args::EditorArgs, editor::run_editor, history::History};
/// let dir = tempfile::tempdir()?;
/// let file = dir.path().join("hello.txt");
/// let history = History::new(dir.path().join("state"));
/// let create = serde_json::json!({"command": "create", "path": file, "file_text": "hi\n"});
/// run_editor(&EditorArgs::from_value(&create)?, &history)?;
/// let view = serde_json::json!({"command": "view", "path": file});
/// let shown = run_editor(&EditorArgs::from_value(&view)?, &history)?;
/// assert!(shown.ends_with("     1\thi\n"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_editor(args: &EditorArgs, history: &History) -> Result<String, EditorError> {
    let path = args.path.as_str();
    if !Path::new(path).is_absolute() {
        return Err(EditorError::new(format!(
            "The path {path} is not an absolute path, it should start with `/`. Maybe you meant /{}?",
            path.trim_start_matches("./")
        )));
    }
    // None: nothing there (not even a dangling link); Some(is_dir) otherwise.
    let kind = std::fs::symlink_metadata(path)
        .ok()
        .map(|_| std::fs::metadata(path).is_ok_and(|m| m.is_dir()));
    match (args.command, kind) {
        (EditorCommand::Create, Some(_)) => {
            return Err(EditorError::new(format!(
                "File already exists at: {path}. Cannot overwrite files using command `create`. \
                 Use `str_replace` to edit it, or delete it first with execute_bash."
            )))
        }
        (EditorCommand::Create, None) | (EditorCommand::UndoEdit, _) => {}
        (_, None) => {
            return Err(EditorError::new(format!("The path {path} does not exist. Please provide a valid path.")))
        }
        (EditorCommand::View, Some(_)) => {}
        (_, Some(true)) => {
            return Err(EditorError::new(format!(
                "The path {path} is a directory and only the `view` command can be used on directories."
            )))
        }
        (_, Some(false)) => {}
    }
    match args.command {
        EditorCommand::View => view::view(path, args.view_range, kind == Some(true)),
        EditorCommand::Create => edit::create(path, args.file_text.as_deref(), history),
        EditorCommand::StrReplace => edit::str_replace(
            path,
            args.old_str.as_deref(),
            args.new_str.as_deref(),
            history,
        ),
        EditorCommand::Insert => {
            edit::insert(path, args.insert_line, args.new_str.as_deref(), history)
        }
        EditorCommand::UndoEdit => edit::undo(path, history),
    }
}

#[cfg(test)]
mod tests;
