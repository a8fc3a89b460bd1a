//! `create`, `str_replace`, `insert` and `undo_edit`. Each edit records the file's previous
//! bytes in the [`History`] before it writes, and writes atomically (temporary file + rename,
//! permissions kept).

use std::fs;
use std::io::Write as _;
use std::path::Path;

use super::text::{
    as_text, display_lines, line_ending, line_of, line_starts, match_offsets, number_lines, to_crlf,
};
use super::{EditorError, MAX_RESPONSE_LEN, SNIPPET_LINES, TRUNCATED_NOTE};
use crate::toolbox::args::ArgsError;
use crate::toolbox::history::{write_atomically, History, Previous};
use crate::toolbox::truncate::truncate_head;

fn missing(field: &'static str, command: &str) -> EditorError {
    EditorError::new(format!(
        "{} for command `{command}`.",
        ArgsError::Missing(field)
    ))
}

fn history_error(path: &str, e: &std::io::Error) -> EditorError {
    EditorError::new(format!(
        "Failed to record the edit history of {path}: {e}; the file was not changed."
    ))
}

/// Lines `first..=last` (1-based, clamped) of `text` with `cat -n` numbers.
fn snippet(text: &str, first: usize, last: usize) -> String {
    let lines = display_lines(text);
    let first = first.max(1);
    let last = last.min(lines.len());
    if first > last {
        return String::new();
    }
    number_lines(&lines[first - 1..last], first)
}

fn edited_message(path: &str, text: &str, first: usize, last: usize) -> String {
    let shown = snippet(
        text,
        first.saturating_sub(SNIPPET_LINES),
        last + SNIPPET_LINES,
    );
    format!(
        "The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n{shown}\
         Review the changes and make sure they are as expected. Edit the file again if necessary."
    )
}

fn read_text_file(path: &str) -> Result<Vec<u8>, EditorError> {
    let bytes = fs::read(path).map_err(|e| EditorError::io("read", path, &e))?;
    as_text(path, &bytes)?;
    Ok(bytes)
}

/// Records `previous`, then writes `new`; the record is dropped again if the write fails.
fn commit(path: &str, previous: Vec<u8>, new: &str, history: &History) -> Result<(), EditorError> {
    history
        .record(path, &Previous::Content(previous))
        .map_err(|e| history_error(path, &e))?;
    let target = fs::canonicalize(path).unwrap_or_else(|_| Path::new(path).to_path_buf());
    write_atomically(&target, new.as_bytes()).map_err(|e| {
        let _ = history.pop(path);
        EditorError::io("write", path, &e)
    })
}

pub(super) fn create(
    path: &str,
    file_text: Option<&str>,
    history: &History,
) -> Result<String, EditorError> {
    let text = file_text.ok_or_else(|| missing("file_text", "create"))?;
    if let Some(parent) = Path::new(path).parent() {
        fs::create_dir_all(parent)
            .map_err(|e| EditorError::io("create the parent directory of", path, &e))?;
    }
    history
        .record(path, &Previous::Absent)
        .map_err(|e| history_error(path, &e))?;
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
        });
    if let Err(e) = written {
        let _ = history.pop(path);
        return Err(EditorError::io("create", path, &e));
    }
    Ok(format!("File created successfully at: {path}"))
}

pub(super) fn str_replace(
    path: &str,
    old_str: Option<&str>,
    new_str: Option<&str>,
    history: &History,
) -> Result<String, EditorError> {
    let old = old_str.ok_or_else(|| missing("old_str", "str_replace"))?;
    let new = new_str.unwrap_or("");
    if old.is_empty() {
        return Err(EditorError::new(
            "`old_str` must not be empty; to add text use the `insert` command.",
        ));
    }
    if old == new {
        return Err(EditorError::new(format!(
            "No replacement was performed: `old_str` and `new_str` are identical in {path}."
        )));
    }
    let bytes = read_text_file(path)?;
    let text = as_text(path, &bytes)?;
    let mut offsets = match_offsets(text, old);
    let (mut old, mut new) = (old.to_owned(), new.to_owned());
    // A CRLF file and an old_str written with bare LF: match with the file's line endings.
    if offsets.is_empty()
        && line_ending(text) == "\r\n"
        && old.contains('\n')
        && !old.contains('\r')
    {
        let crlf_offsets = match_offsets(text, &to_crlf(&old));
        if !crlf_offsets.is_empty() {
            offsets = crlf_offsets;
            old = to_crlf(&old);
            new = to_crlf(&new);
        }
    }
    let starts = line_starts(text);
    match offsets.as_slice() {
        [] => Err(EditorError::new(format!(
            "No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        ))),
        [offset] => {
            let offset = *offset;
            let mut edited = String::with_capacity(text.len() - old.len() + new.len());
            edited.push_str(&text[..offset]);
            edited.push_str(&new);
            edited.push_str(&text[offset + old.len()..]);
            commit(path, bytes.clone(), &edited, history)?;
            let first = line_of(&starts, offset);
            Ok(edited_message(
                path,
                &edited,
                first,
                first + new.matches('\n').count(),
            ))
        }
        many => {
            let lines: Vec<String> = many
                .iter()
                .map(|&o| line_of(&starts, o).to_string())
                .collect();
            Err(EditorError::new(format!(
                "No replacement was performed. old_str `{old}` matched {} times in {path}, starting at lines [{}]. \
                 Please include more surrounding lines so that it is unique.",
                many.len(),
                lines.join(", ")
            )))
        }
    }
}

pub(super) fn insert(
    path: &str,
    insert_line: Option<i64>,
    new_str: Option<&str>,
    history: &History,
) -> Result<String, EditorError> {
    let line = insert_line.ok_or_else(|| missing("insert_line", "insert"))?;
    let new = new_str.ok_or_else(|| missing("new_str", "insert"))?;
    let bytes = read_text_file(path)?;
    let text = as_text(path, &bytes)?;
    let starts = line_starts(text);
    let n = starts.len();
    let line = match usize::try_from(line) {
        Ok(l) if l <= n => l,
        _ => {
            return Err(EditorError::new(format!(
                "Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: [0, {n}] \
                 (the text is inserted after that line; 0 inserts at the top)."
            )))
        }
    };
    let eol = line_ending(text);
    let mut inserted = if eol == "\r\n" {
        to_crlf(new)
    } else {
        new.to_owned()
    };
    let offset = starts.get(line).copied().unwrap_or(text.len());
    if offset == text.len() && !text.is_empty() && !text.ends_with('\n') {
        // After a last line without a newline: end that line, keep the file's missing newline.
        inserted.insert_str(0, eol);
    } else if !inserted.ends_with('\n') {
        inserted.push_str(eol);
    }
    let mut edited = String::with_capacity(text.len() + inserted.len());
    edited.push_str(&text[..offset]);
    edited.push_str(&inserted);
    edited.push_str(&text[offset..]);
    commit(path, bytes.clone(), &edited, history)?;
    let added = new.matches('\n').count() + usize::from(!new.ends_with('\n'));
    Ok(edited_message(path, &edited, line + 1, line + added.max(1)))
}

pub(super) fn undo(path: &str, history: &History) -> Result<String, EditorError> {
    let previous = history
        .pop(path)
        .map_err(|e| EditorError::io("read the edit history of", path, &e))?;
    match previous {
        None => Err(EditorError::new(format!(
            "No edit history found for {path}."
        ))),
        Some(Previous::Absent) => {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(EditorError::io("remove", path, &e)),
            }
            Ok(format!("Last edit to {path} undone successfully. The file had been created by that edit, so it was removed."))
        }
        Some(Previous::Content(bytes)) => {
            let target = fs::canonicalize(path).unwrap_or_else(|_| Path::new(path).to_path_buf());
            write_atomically(&target, &bytes).map_err(|e| EditorError::io("restore", path, &e))?;
            let shown = match std::str::from_utf8(&bytes) {
                Ok(text) => number_lines(&display_lines(text), 1),
                Err(_) => String::new(),
            };
            let shown = truncate_head(&shown, MAX_RESPONSE_LEN, TRUNCATED_NOTE);
            Ok(format!(
                "Last edit to {path} undone successfully. Here's the result of running `cat -n` on {path}:\n{shown}"
            ))
        }
    }
}
