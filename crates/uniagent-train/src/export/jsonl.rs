//! Reading `trajectories.jsonl`: one [`Trajectory`] per line, with the `phase` and `step` tags
//! that `uniagent train` adds.

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use uniagent_core::agent::Trajectory;
use uniagent_core::{Error, Result};

/// One line of a `trajectories.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlLine {
    /// The rollout.
    pub trajectory: Trajectory,
    /// `demonstration`, `eval`, `rl`, ... (`uniagent train`); `None` in `uniagent run` files.
    pub phase: Option<String>,
    /// The training step (`uniagent train`); `None` in `uniagent run` files.
    pub step: Option<u64>,
    /// The 1-based line number, for messages.
    pub line: usize,
}

/// The tags next to the trajectory's own fields.
#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    step: Option<u64>,
}

/// An iterator over the lines of a `trajectories.jsonl` ([`read_jsonl`]).
#[derive(Debug)]
pub struct JsonlLines {
    path: PathBuf,
    lines: Lines<BufReader<File>>,
    line: usize,
}

/// Opens `path` and reads it line by line (blank lines skipped); each item is a
/// [`JsonlLine`], or [`Error::InvalidInput`] naming `path:line` for a line that is not a
/// trajectory, or [`Error::Io`].
///
/// ```no_run
/// # fn main() -> uniagent_core::Result<()> {
/// for line in uniagent_train::export::read_jsonl("runs/quick/trajectories.jsonl".as_ref())? {
///     let line = line?;
///     println!("{} {:?} {:?}", line.trajectory.id, line.phase, line.step);
/// }
/// # Ok(()) }
/// ```
pub fn read_jsonl(path: &Path) -> Result<JsonlLines> {
    let file = File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    Ok(JsonlLines {
        path: path.to_owned(),
        lines: BufReader::new(file).lines(),
        line: 0,
    })
}

impl Iterator for JsonlLines {
    type Item = Result<JsonlLine>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let text = match self.lines.next()? {
                Ok(text) => text,
                Err(e) => {
                    return Some(Err(Error::io(
                        format!("reading {}", self.path.display()),
                        e,
                    )))
                }
            };
            self.line += 1;
            if text.trim().is_empty() {
                continue;
            }
            return Some(self.parse(&text));
        }
    }
}

impl JsonlLines {
    fn parse(&self, text: &str) -> Result<JsonlLine> {
        let at = || format!("{}:{}", self.path.display(), self.line);
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::invalid_input(format!("{}: not valid JSON: {e}", at())))?;
        let tags = Tags::deserialize(&value)
            .map_err(|e| Error::invalid_input(format!("{}: {e}", at())))?;
        let trajectory = Trajectory::deserialize(value)
            .map_err(|e| Error::invalid_input(format!("{}: not a trajectory: {e}", at())))?;
        Ok(JsonlLine {
            trajectory,
            phase: tags.phase,
            step: tags.step,
            line: self.line,
        })
    }
}
