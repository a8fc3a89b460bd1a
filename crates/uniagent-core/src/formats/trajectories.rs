//! `trajectories.jsonl`: one [`Trajectory`] record per line, written by `uniagent run`,
//! `uniagent train`, the gateway and [`JsonlSink`](crate::runner::JsonlSink).
//!
//! Every writer builds its line with [`record`] (and, where it applies,
//! [`without_token_fields`] and [`tag`]), so the rules are in one place: the record is the
//! trajectory as serde writes it, with verl's `AgentLoopOutput` flattened into the top level,
//! and `response_logprobs` is **absent**, never `null`, when the backend reported none.
//!
//! Version 1 is the current one; its JSON Schema is [`SCHEMA`]
//! (`schemas/trajectory-record.v1.schema.json` in this crate). A line without
//! `record_version` is version 1; [`parse_line`] refuses a version it does not know with a
//! typed error instead of misreading it, and reads lines of API-level backends (no token
//! fields) with empty token lists.
//!
//! ```
//! use uniagent_core::agent::{ExitReason, Trajectory};
//! use uniagent_core::formats::trajectories::{parse_line, record, tag};
//! use uniagent_core::Message;
//!
//! let t = Trajectory::empty("t", 0, vec![Message::user("hi")], ExitReason::Finished, None);
//! let mut line = record(&t);
//! assert!(!line.contains_key("response_logprobs")); // absent, not null
//! tag(&mut line, "rl", 3);
//! let read = parse_line(&serde_json::to_string(&line)?)?;
//! assert_eq!((read.trajectory, read.phase.as_deref(), read.step), (t, Some("rl"), Some(3)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::jsonl::JsonlLines;
use crate::agent::Trajectory;
use crate::error::{Error, Result};
use crate::rollout::AgentLoopOutput;

/// The file name in an output directory.
pub const FILE_NAME: &str = "trajectories.jsonl";

/// The version writers produce (lines carry no `record_version` field while it is 1).
pub const VERSION: u32 = 1;

/// The JSON Schema (draft 2020-12) of a version-1 record, as writers produce it.
pub const SCHEMA: &str = include_str!("../../schemas/trajectory-record.v1.schema.json");

/// The record of `t`: its serde form, `response_logprobs` left out when the backend reported
/// none.
pub fn record(t: &Trajectory) -> Map<String, Value> {
    let mut map = match serde_json::to_value(t) {
        Ok(Value::Object(map)) => map,
        // A struct always serializes to an object; nothing else can come back.
        _ => Map::new(),
    };
    if map.get("response_logprobs").is_some_and(Value::is_null) {
        map.remove("response_logprobs");
    }
    map
}

/// Leaves the token fields out of `record` (API-level backends, whose token ids are not the
/// policy's).
pub fn without_token_fields(record: &mut Map<String, Value>) {
    for key in AgentLoopOutput::TOKEN_FIELDS {
        record.remove(key);
    }
}

/// Tags `record` with the training pipeline's `phase` and `step`.
pub fn tag(record: &mut Map<String, Value>, phase: &str, step: usize) {
    record.insert("phase".into(), phase.into());
    record.insert("step".into(), step.into());
}

/// `record` as one line, `\n` included.
pub fn to_line(record: &Map<String, Value>) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(record)
        .map_err(|e| Error::io("encoding a trajectory", std::io::Error::other(e)))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// One line read back.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordLine {
    /// The rollout.
    pub trajectory: Trajectory,
    /// `demonstration`, `sft_probe`, `eval`, `rl` (`uniagent train`); `None` elsewhere.
    pub phase: Option<String>,
    /// The training step (`uniagent train`); `None` elsewhere.
    pub step: Option<u64>,
    /// The 1-based line number ([`read`]; 0 from [`parse_line`]).
    pub line: usize,
}

/// The fields next to the trajectory's own.
#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    record_version: Option<u32>,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    step: Option<u64>,
}

/// Reads one line (version 1 or a line without token fields).
///
/// Errors: [`Error::InvalidInput`] for text that is not JSON, not a record, or of a newer
/// version than this reader knows.
pub fn parse_line(text: &str) -> Result<RecordLine> {
    let mut value: Value = serde_json::from_str(text)
        .map_err(|e| Error::invalid_input(format!("not valid JSON: {e}")))?;
    let tags = Tags::deserialize(&value).map_err(|e| Error::invalid_input(e.to_string()))?;
    if let Some(version) = tags.record_version.filter(|v| *v != VERSION) {
        return Err(Error::invalid_input(format!(
            "trajectory record version {version}; this reader knows version {VERSION}"
        )));
    }
    if let Value::Object(map) = &mut value {
        // API-level backends write no token fields: read them as empty.
        for key in ["prompt_ids", "response_ids", "response_mask"] {
            map.entry(key).or_insert_with(|| Value::Array(Vec::new()));
        }
    }
    let trajectory = Trajectory::deserialize(value)
        .map_err(|e| Error::invalid_input(format!("not a trajectory: {e}")))?;
    Ok(RecordLine {
        trajectory,
        phase: tags.phase,
        step: tags.step,
        line: 0,
    })
}

/// An iterator over the records of a `trajectories.jsonl` ([`read`]).
#[derive(Debug)]
pub struct RecordLines {
    lines: JsonlLines,
}

/// Opens `path` and reads it record by record (blank lines skipped); each item is a
/// [`RecordLine`], [`Error::InvalidInput`] naming `path:line` for a line that is not a record,
/// or [`Error::Io`].
///
/// ```no_run
/// # fn main() -> uniagent_core::Result<()> {
/// use uniagent_core::formats::trajectories;
/// for line in trajectories::read("runs/quick/trajectories.jsonl".as_ref())? {
///     let line = line?;
///     println!("{} {:?} {:?}", line.trajectory.id, line.phase, line.step);
/// }
/// # Ok(()) }
/// ```
pub fn read(path: &Path) -> Result<RecordLines> {
    Ok(RecordLines {
        lines: JsonlLines::open(path)?,
    })
}

impl Iterator for RecordLines {
    type Item = Result<RecordLine>;

    fn next(&mut self) -> Option<Self::Item> {
        self.lines
            .next_parsed(|text, line| parse_line(text).map(|l| RecordLine { line, ..l }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ExitReason;
    use crate::Message;

    #[test]
    fn newer_versions_and_non_records_are_typed_errors() {
        let t = Trajectory::empty("t", 1, vec![Message::user("x")], ExitReason::Finished, None);
        let mut line = record(&t);
        line.insert("record_version".into(), 2.into());
        let err = parse_line(&Value::Object(line).to_string()).unwrap_err();
        assert!(err.to_string().contains("version 2"), "{err}");
        assert!(parse_line("{\"id\": 3}").is_err());
        assert!(parse_line("nope").is_err());
    }

    #[test]
    fn api_level_lines_read_with_empty_token_fields() {
        let mut t = Trajectory::empty("t", 0, vec![Message::user("x")], ExitReason::Finished, None);
        t.output.prompt_ids = vec![1, 2];
        let mut line = record(&t);
        without_token_fields(&mut line);
        assert!(!line.contains_key("prompt_ids"));
        let back = parse_line(&Value::Object(line).to_string()).unwrap();
        assert!(back.trajectory.output.prompt_ids.is_empty());
        assert_eq!(back.trajectory.messages, t.messages);
    }
}
