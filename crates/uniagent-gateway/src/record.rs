//! [`Recorder`]: appends ended sessions' trajectories to `trajectories.jsonl` (and their
//! cassettes to `cassettes.jsonl`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use crate::error::{GatewayError, Result};

/// The file name inside the output directory (the same as `uniagent run` writes).
pub const TRAJECTORIES: &str = uniagent_core::formats::trajectories::FILE_NAME;

/// Appends one flushed JSON line per record to `DIR/trajectories.jsonl` (or another file of
/// `DIR`, see [`open`](Self::open)).
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    file: Mutex<File>,
}

impl Recorder {
    /// Creates `dir` if needed and opens its `trajectories.jsonl` for appending.
    pub fn create(dir: &Path) -> Result<Self> {
        Self::open(dir, TRAJECTORIES)
    }

    /// Creates `dir` if needed and opens its file `name` (e.g.
    /// [`CASSETTES`](crate::cassette::CASSETTES)) for appending.
    pub fn open(dir: &Path, name: &str) -> Result<Self> {
        let recording = |e: std::io::Error, what: &str| GatewayError::Recording {
            message: format!("{what} {}: {e}", dir.display()),
        };
        std::fs::create_dir_all(dir).map_err(|e| recording(e, "cannot create"))?;
        let path = dir.join(name);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| recording(e, &format!("cannot open {name} in")))?;
        Ok(Self {
            path,
            file: Mutex::new(file),
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `records`, one line each, in a single write so that sessions ending together
    /// do not interleave.
    pub fn append(&self, records: &[Value]) -> Result<()> {
        let mut bytes = Vec::new();
        for r in records {
            serde_json::to_writer(&mut bytes, r).map_err(|e| GatewayError::Recording {
                message: format!("encoding a record: {e}"),
            })?;
            bytes.push(b'\n');
        }
        self.append_bytes(&bytes)
    }

    /// Appends `lines`, already encoded (each ended by `\n`, e.g. a
    /// [`GatewayCassette::to_line`](crate::cassette::GatewayCassette::to_line)), in a single
    /// write.
    pub fn append_bytes(&self, lines: &[u8]) -> Result<()> {
        let mut file = self.file.lock().map_err(|_| GatewayError::Internal {
            message: "recorder lock poisoned".into(),
        })?;
        file.write_all(lines)
            .and_then(|()| file.flush())
            .map_err(|e| GatewayError::Recording {
                message: format!("writing {}: {e}", self.path.display()),
            })
    }
}
