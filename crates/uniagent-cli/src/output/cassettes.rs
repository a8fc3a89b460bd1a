//! `cassettes.jsonl`: one cassette per finished rollout (`output.cassettes: true`), written
//! as its trajectory is, for `uniagent replay`.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use uniagent_core::agent::{LoopConfig, Trajectory};
use uniagent_core::cassette::Recorder;
use uniagent_core::{Task, ToolSpec};

use crate::error::{CliError, Result};

/// Appends the cassette of each finished rollout; discards the steps of rollouts not kept.
pub struct CassetteFile {
    file: File,
    recorder: Arc<Recorder>,
    tasks: HashMap<String, Task>,
    tools: Vec<ToolSpec>,
    loop_config: LoopConfig,
    generator: String,
    context: Value,
}

impl std::fmt::Debug for CassetteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassetteFile")
            .field("generator", &self.generator)
            .finish_non_exhaustive()
    }
}

/// What every cassette of a run shares.
#[derive(Debug, Clone)]
pub struct CassetteRun {
    /// The steps, recorded by the run's generator and tools.
    pub recorder: Arc<Recorder>,
    /// The run's tasks.
    pub tasks: Vec<Task>,
    /// The tool specs offered.
    pub tools: Vec<ToolSpec>,
    /// The loop configuration.
    pub loop_config: LoopConfig,
    /// The generator backend.
    pub generator: String,
    /// Kept in every cassette: `{"config": <effective config>, "config_file": <path>}`.
    pub context: Value,
}

impl CassetteFile {
    /// Opens `path` for appending.
    pub fn open(path: &Path, run: CassetteRun) -> Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| CliError::runtime(format!("opening {}: {e}", path.display())))?;
        Ok(Self {
            file,
            recorder: run.recorder,
            tasks: run.tasks.into_iter().map(|t| (t.id.clone(), t)).collect(),
            tools: run.tools,
            loop_config: run.loop_config,
            generator: run.generator,
            context: run.context,
        })
    }

    /// Forgets rollout `id` (cancelled: it runs again on resume).
    pub fn discard(&self, id: &str) {
        self.recorder.discard(id);
    }

    /// Writes the cassette of `t` (as the run produced it, before any sample remapping).
    pub fn write(&mut self, t: &Trajectory) -> uniagent_core::Result<()> {
        let Some(task) = self.tasks.get(&t.task_id) else {
            self.recorder.discard(&t.id);
            return Ok(());
        };
        let cassette = self.recorder.cassette(
            t,
            task,
            self.tools.clone(),
            self.loop_config.clone(),
            &self.generator,
            self.context.clone(),
        );
        let bytes = cassette.to_line()?;
        self.file
            .write_all(&bytes)
            .and_then(|()| self.file.flush())
            .map_err(|e| uniagent_core::Error::io("writing cassettes.jsonl", e))
    }
}
