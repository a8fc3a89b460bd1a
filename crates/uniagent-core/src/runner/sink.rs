//! Where finished trajectories go: [`TrajectorySink`], with a JSONL writer.

use std::io::Write;

use crate::agent::Trajectory;
use crate::error::{Error, Result};
use crate::formats::trajectories;

/// Receives every finished trajectory of a run, in completion order.
pub trait TrajectorySink: Send {
    /// Stores one trajectory.
    fn write(&mut self, trajectory: &Trajectory) -> Result<()>;

    /// Flushes buffered output; called once at the end of a run.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Keeps trajectories in memory.
impl TrajectorySink for Vec<Trajectory> {
    fn write(&mut self, trajectory: &Trajectory) -> Result<()> {
        self.push(trajectory.clone());
        Ok(())
    }
}

/// Writes one trajectory record per line
/// ([`formats::trajectories::record`](crate::formats::trajectories::record)).
///
/// ```
/// use uniagent_core::agent::{ExitReason, Trajectory};
/// use uniagent_core::runner::{JsonlSink, TrajectorySink};
///
/// let mut sink = JsonlSink::new(Vec::new());
/// sink.write(&Trajectory::empty("t", 0, vec![], ExitReason::Cancelled, None)).unwrap();
/// let text = String::from_utf8(sink.into_inner()).unwrap();
/// assert_eq!(text.lines().count(), 1);
/// let back: Trajectory = serde_json::from_str(text.trim_end()).unwrap();
/// assert_eq!(back.exit_reason, ExitReason::Cancelled);
/// ```
#[derive(Debug)]
pub struct JsonlSink<W: Write + Send> {
    out: W,
    written: u64,
}

impl<W: Write + Send> JsonlSink<W> {
    /// A sink writing to `out` (wrap files in a `BufWriter`).
    pub fn new(out: W) -> Self {
        Self { out, written: 0 }
    }

    /// Lines written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write + Send> TrajectorySink for JsonlSink<W> {
    fn write(&mut self, trajectory: &Trajectory) -> Result<()> {
        let line = trajectories::to_line(&trajectories::record(trajectory))?;
        self.out
            .write_all(&line)
            .map_err(|e| Error::io("writing a trajectory line", e))?;
        self.written += 1;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .map_err(|e| Error::io("flushing trajectories", e))
    }
}
