//! `view`: a file with `cat -n` numbering (optionally a line range), or a directory two levels
//! deep without hidden entries.

use std::fs;
use std::path::Path;

use super::text::{as_text, display_lines, number_lines};
use super::{EditorError, MAX_RESPONSE_LEN, TRUNCATED_NOTE};
use crate::toolbox::truncate::truncate_head;

pub(super) fn view(
    path: &str,
    range: Option<(i64, i64)>,
    is_dir: bool,
) -> Result<String, EditorError> {
    if is_dir {
        if range.is_some() {
            return Err(EditorError::new(
                "The `view_range` parameter is not allowed when `path` points to a directory.",
            ));
        }
        return view_dir(path);
    }
    let bytes = fs::read(path).map_err(|e| EditorError::io("read", path, &e))?;
    let text = as_text(path, &bytes)?;
    let lines = display_lines(text);
    let (first, shown) = match range {
        None => (1, &lines[..]),
        Some((start, end)) => {
            let n = lines.len() as i64;
            if start < 1 || start > n.max(1) {
                return Err(EditorError::new(format!(
                    "Invalid `view_range`: [{start}, {end}]. Its first element `{start}` should be within the range \
                     of lines of the file: [1, {n}]."
                )));
            }
            let last = if end == -1 { n } else { end };
            if last < start {
                return Err(EditorError::new(format!(
                    "Invalid `view_range`: [{start}, {end}]. Its second element `{end}` should be -1 (to the end) \
                     or larger than or equal to its first element `{start}`."
                )));
            }
            let last = last.min(n);
            (
                start as usize,
                lines
                    .get(start as usize - 1..last as usize)
                    .unwrap_or_default(),
            )
        }
    };
    let body = number_lines(shown, first);
    let body = truncate_head(&body, MAX_RESPONSE_LEN, TRUNCATED_NOTE);
    Ok(format!(
        "Here's the result of running `cat -n` on {path}:\n{body}"
    ))
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.starts_with('.'))
}

fn view_dir(path: &str) -> Result<String, EditorError> {
    let mut out = format!(
        "Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n{}\n",
        path.trim_end_matches('/').to_owned() + if path == "/" { "/" } else { "" }
    );
    list(Path::new(path), 1, &mut out).map_err(|e| EditorError::io("list", path, &e))?;
    Ok(out)
}

fn list(dir: &Path, depth: usize, out: &mut String) -> std::io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| !is_hidden(&e.file_name()))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let child = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.push_str(&child.to_string_lossy());
        out.push_str(if is_dir { "/\n" } else { "\n" });
        if is_dir && depth < 2 {
            // An unreadable subdirectory is listed but not entered.
            let _ = list(&child, depth + 1, out);
        }
    }
    Ok(())
}
