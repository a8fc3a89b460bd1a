//! The output directory of `run` / `train`: `trajectories.jsonl` (one line per finished
//! rollout, flushed as it finishes), `summary.json`, the effective `config.yaml`; and resume.
//!
//! A rollout counts as finished when its line is in `trajectories.jsonl`. Cancelled rollouts
//! (Ctrl-C) are not written, so rerunning the same command runs exactly the missing
//! `(task_id, sample)` pairs. A line torn by a crash mid-write is cut off on resume.

mod cassettes;
mod summary;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use uniagent_core::agent::{rollout_id, ExitReason, Trajectory};
use uniagent_core::formats::trajectories;
use uniagent_core::runner::TrajectorySink;

pub use cassettes::{CassetteFile, CassetteRun};
#[cfg(feature = "tch")]
pub(crate) use summary::count_by;
pub(crate) use summary::summarize;
pub use summary::RunSummary;

use crate::error::{CliError, Result};
use crate::model::VersionLog;

/// File names inside the output directory.
pub const TRAJECTORIES: &str = uniagent_core::formats::trajectories::FILE_NAME;
/// The summary.
pub const SUMMARY: &str = "summary.json";
/// The effective configuration (file plus overrides).
pub const CONFIG: &str = "config.yaml";
/// The cassettes (`output.cassettes: true`).
pub const CASSETTES: &str = uniagent_core::formats::cassettes::FILE_NAME;

/// An output directory.
#[derive(Debug, Clone)]
pub struct OutputDir {
    dir: PathBuf,
}

impl OutputDir {
    /// Creates the directory if needed.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::runtime(format!(
                "cannot create the output directory {}: {e}",
                dir.display()
            ))
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Path of `trajectories.jsonl`.
    pub fn trajectories(&self) -> PathBuf {
        self.dir.join(TRAJECTORIES)
    }

    /// Writes the effective configuration.
    pub fn write_config(&self, config: &Value) -> Result<()> {
        let text = serde_norway::to_string(config)
            .map_err(|e| CliError::runtime(format!("serialising the effective config: {e}")))?;
        write_atomic(&self.dir.join(CONFIG), text.as_bytes())
    }

    /// The `(task_id, sample)` pairs already finished; cuts off a torn last line.
    pub fn finished(&self) -> Result<BTreeSet<(String, u32)>> {
        let path = self.trajectories();
        let mut done = BTreeSet::new();
        let Ok(file) = File::open(&path) else {
            return Ok(done);
        };
        let mut good_len = 0u64;
        let mut torn = false;
        for line in BufReader::new(file).split(b'\n') {
            let line =
                line.map_err(|e| CliError::runtime(format!("reading {}: {e}", path.display())))?;
            if torn {
                return Err(CliError::runtime(format!(
                    "{} has a malformed line before its end; move it away to start over",
                    path.display()
                )));
            }
            match serde_json::from_slice::<Value>(&line) {
                Ok(v) => {
                    let task = v.get("task_id").and_then(Value::as_str);
                    let sample = v.get("sample").and_then(Value::as_u64);
                    if let (Some(task), Some(sample)) = (task, sample) {
                        done.insert((task.to_owned(), sample as u32));
                    }
                    good_len += line.len() as u64 + 1;
                }
                Err(_) if line.iter().all(u8::is_ascii_whitespace) => {
                    good_len += line.len() as u64 + 1
                }
                Err(_) => torn = true,
            }
        }
        if torn {
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| CliError::runtime(format!("opening {}: {e}", path.display())))?;
            file.set_len(good_len)
                .map_err(|e| CliError::runtime(format!("truncating {}: {e}", path.display())))?;
        }
        Ok(done)
    }

    /// Opens `trajectories.jsonl` for appending.
    pub fn sink(
        &self,
        token_level: bool,
        versions: Option<Arc<VersionLog>>,
    ) -> Result<TrajectoryFile> {
        let path = self.trajectories();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| CliError::runtime(format!("opening {}: {e}", path.display())))?;
        Ok(TrajectoryFile {
            file,
            token_level,
            versions,
            remap: HashMap::new(),
            written: 0,
            on_write: None,
            cassettes: None,
        })
    }

    /// Summarises every trajectory in the directory and writes `summary.json`.
    pub fn write_summary(&self, tasks: usize, wall_time: f64) -> Result<RunSummary> {
        let summary = summarize(&self.trajectories(), tasks, wall_time)?;
        let text = serde_json::to_vec_pretty(&summary)
            .map_err(|e| CliError::runtime(format!("serialising the summary: {e}")))?;
        write_atomic(&self.dir.join(SUMMARY), &text)?;
        Ok(summary)
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| CliError::runtime(format!("writing {}: {e}", path.display())))
}

type WriteHook = Box<dyn FnMut(&Value) + Send>;

/// Appends finished trajectories to `trajectories.jsonl`, one flushed line each.
pub struct TrajectoryFile {
    file: File,
    token_level: bool,
    versions: Option<Arc<VersionLog>>,
    /// Sample indices to give the rollouts of tasks run one sample at a time (resume).
    remap: HashMap<String, VecDeque<u32>>,
    written: u64,
    on_write: Option<WriteHook>,
    cassettes: Option<CassetteFile>,
}

impl std::fmt::Debug for TrajectoryFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrajectoryFile")
            .field("token_level", &self.token_level)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl TrajectoryFile {
    /// Rollouts of `task_id` get these sample indices, in the order they finish.
    pub fn remap_samples(&mut self, task_id: &str, samples: Vec<u32>) {
        self.remap.insert(task_id.to_owned(), samples.into());
    }

    /// Calls `hook` with every line written (progress reporting).
    pub fn on_write(&mut self, hook: impl FnMut(&Value) + Send + 'static) {
        self.on_write = Some(Box::new(hook));
    }

    /// Also writes each finished rollout's cassette to `cassettes.jsonl` in `dir`.
    pub fn record_cassettes(&mut self, dir: &OutputDir, run: CassetteRun) -> Result<()> {
        self.cassettes = Some(CassetteFile::open(&dir.path().join(CASSETTES), run)?);
        Ok(())
    }

    /// Lines written by this sink.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The JSON line of `t`: token fields only for token-level backends, logprobs absent when
    /// the backend gave none, `weight_versions` aligned with the response tokens.
    pub fn record(&self, t: &Trajectory, run_id: &str) -> Value {
        let mut map = trajectories::record(t);
        if !self.token_level {
            trajectories::without_token_fields(&mut map);
        } else if let Some(log) = &self.versions {
            let mut sampled = log.take(run_id).into_iter();
            let versions: Vec<Value> = t
                .output
                .response_mask
                .iter()
                .map(|&m| match m {
                    1 => sampled.next().flatten().map_or(Value::Null, Value::from),
                    _ => Value::Null,
                })
                .collect();
            map.insert("weight_versions".into(), Value::Array(versions));
        }
        Value::Object(map)
    }
}

impl TrajectorySink for TrajectoryFile {
    fn write(&mut self, trajectory: &Trajectory) -> uniagent_core::Result<()> {
        // Not finished: resume runs it again.
        if trajectory.exit_reason == ExitReason::Cancelled {
            if let Some(c) = &self.cassettes {
                c.discard(&trajectory.id);
            }
            return Ok(());
        }
        let run_id = trajectory.id.clone();
        let mut t = trajectory.clone();
        if let Some(queue) = self.remap.get_mut(&t.task_id) {
            if let Some(sample) = queue.pop_front() {
                t.sample = sample;
                t.id = rollout_id(&t.task_id, sample);
            }
        }
        let line = self.record(&t, &run_id);
        let mut bytes = serde_json::to_vec(&line).map_err(|e| {
            uniagent_core::Error::io("encoding a trajectory", std::io::Error::other(e))
        })?;
        bytes.push(b'\n');
        // One write per line, then flush, so a crash leaves at most one torn line.
        self.file
            .write_all(&bytes)
            .and_then(|()| self.file.flush())
            .map_err(|e| uniagent_core::Error::io("writing trajectories.jsonl", e))?;
        self.written += 1;
        // After its trajectory: a cassette never outlives a rollout that resume runs again.
        if let Some(c) = &mut self.cassettes {
            c.write(trajectory)?;
        }
        if let Some(hook) = &mut self.on_write {
            hook(&line);
        }
        Ok(())
    }

    fn flush(&mut self) -> uniagent_core::Result<()> {
        self.file
            .sync_data()
            .map_err(|e| uniagent_core::Error::io("syncing trajectories.jsonl", e))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uniagent_core::agent::{ExitReason, Trajectory};

    use super::*;

    fn trajectory() -> Trajectory {
        let mut t = Trajectory::empty("t", 0, vec![], ExitReason::Finished, None);
        t.output.prompt_ids = vec![1, 2];
        t.output.response_ids = vec![5, 6, 7, 8];
        t.output.response_mask = vec![1, 1, 0, 1];
        t
    }

    #[test]
    fn token_records_carry_weight_versions_and_no_null_logprobs() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutputDir::create(dir.path()).unwrap();
        let log = Arc::new(VersionLog::default());
        log.record("t:0", 2, Some(3));
        log.record("t:0", 1, None);
        let sink = out.sink(true, Some(Arc::clone(&log))).unwrap();
        let v = sink.record(&trajectory(), "t:0");
        assert_eq!(v["weight_versions"], json!([3, 3, null, null]));
        assert_eq!(v["response_mask"], json!([1, 1, 0, 1]));
        assert!(v.get("response_logprobs").is_none(), "{v}");
        let api = out.sink(false, None).unwrap().record(&trajectory(), "t:0");
        assert!(api.get("prompt_ids").is_none() && api.get("weight_versions").is_none());
    }

    #[test]
    fn cancelled_rollouts_are_not_finished_and_samples_are_remapped() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutputDir::create(dir.path()).unwrap();
        let mut sink = out.sink(false, None).unwrap();
        sink.remap_samples("t", vec![3]);
        sink.write(&Trajectory::empty(
            "t",
            0,
            vec![],
            ExitReason::Cancelled,
            None,
        ))
        .unwrap();
        sink.write(&trajectory()).unwrap();
        assert_eq!(sink.written(), 1);
        let done = out.finished().unwrap();
        assert_eq!(done.into_iter().collect::<Vec<_>>(), [("t".to_owned(), 3)]);
        let summary = out.write_summary(1, 0.0).unwrap();
        assert_eq!(summary.rollouts, 1);
        assert_eq!(summary.exit_reasons["finished"], 1);
        assert_eq!(summary.report.rollouts, 1);
        assert_eq!(summary.report.successes, summary.succeeded);
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(SUMMARY)).unwrap()).unwrap();
        assert_eq!(written["report"]["rollouts"], 1);
    }
}
