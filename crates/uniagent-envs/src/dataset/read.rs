//! Reading dataset rows: JSONL (one object per line) and Parquet (record API).

use std::io::BufRead;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{EnvError, Result};

/// One row of a dataset with its 1-based number (line for JSONL, record for Parquet).
pub type Row = (usize, Map<String, Value>);

/// Reads at most `limit` rows of `path`; the format follows the extension (`.jsonl`,
/// `.json` holding a list, `.parquet`).
pub fn read_rows(path: &Path, limit: Option<usize>) -> Result<Vec<Row>> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("jsonl" | "ndjson") => read_jsonl(path, limit),
        Some("json") => read_json_list(path, limit),
        Some("parquet") => read_parquet(path, limit),
        _ => Err(EnvError::dataset(
            path.display(),
            None,
            "unknown dataset format (use .jsonl, .json or .parquet)",
        )),
    }
}

fn open(path: &Path) -> Result<std::fs::File> {
    std::fs::File::open(path)
        .map_err(|e| EnvError::dataset(path.display(), None, format!("cannot open: {e}")))
}

fn as_object(path: &Path, row: usize, value: Value) -> Result<Map<String, Value>> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(EnvError::dataset(
            path.display(),
            Some(row),
            format!("expected a JSON object, got {}", kind(&other)),
        )),
    }
}

/// A short name of a JSON value's type, for messages.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn read_jsonl(path: &Path, limit: Option<usize>) -> Result<Vec<Row>> {
    let reader = std::io::BufReader::new(open(path)?);
    let mut rows = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        if limit.is_some_and(|n| rows.len() >= n) {
            break;
        }
        let row = i + 1;
        let line = line.map_err(|e| EnvError::dataset(path.display(), Some(row), e))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| {
            EnvError::dataset(path.display(), Some(row), format!("not valid JSON: {e}"))
        })?;
        rows.push((row, as_object(path, row, value)?));
    }
    Ok(rows)
}

fn read_json_list(path: &Path, limit: Option<usize>) -> Result<Vec<Row>> {
    let value: Value = serde_json::from_reader(std::io::BufReader::new(open(path)?))
        .map_err(|e| EnvError::dataset(path.display(), None, format!("not valid JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(EnvError::dataset(
            path.display(),
            None,
            "a .json dataset must hold a list of objects (or use .jsonl)",
        ));
    };
    items
        .into_iter()
        .take(limit.unwrap_or(usize::MAX))
        .enumerate()
        .map(|(i, v)| Ok((i + 1, as_object(path, i + 1, v)?)))
        .collect()
}

#[cfg(feature = "parquet")]
fn read_parquet(path: &Path, limit: Option<usize>) -> Result<Vec<Row>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};

    let bad = |row: Option<usize>, e: &dyn std::fmt::Display| {
        EnvError::dataset(path.display(), row, format!("reading Parquet: {e}"))
    };
    let reader = SerializedFileReader::new(open(path)?).map_err(|e| bad(None, &e))?;
    let iter = reader.get_row_iter(None).map_err(|e| bad(None, &e))?;
    let mut rows = Vec::new();
    for (i, row) in iter.enumerate() {
        if limit.is_some_and(|n| rows.len() >= n) {
            break;
        }
        let row = row.map_err(|e| bad(Some(i + 1), &e))?;
        rows.push((i + 1, as_object(path, i + 1, row.to_json_value())?));
    }
    Ok(rows)
}

#[cfg(not(feature = "parquet"))]
fn read_parquet(path: &Path, _limit: Option<usize>) -> Result<Vec<Row>> {
    Err(EnvError::dataset(
        path.display(),
        None,
        "Parquet datasets need the `parquet` feature of uniagent-cli",
    ))
}
