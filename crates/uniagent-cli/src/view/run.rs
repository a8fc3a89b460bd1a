//! [`Run`]: one output directory (of `run`, `train` or the gateway) and its indexes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::{Map, Value};
use uniagent_core::codec::Codec;

use super::error::ViewError;
use super::index::JsonlIndex;
use super::row::{self, TrajRow};
use crate::output::{SUMMARY, TRAJECTORIES};

/// Bytes a request indexes at most before answering from what is indexed (the background
/// indexer does the rest).
pub(super) const REQUEST_BUDGET: u64 = 16 << 20;

/// `metrics.jsonl` of a `train` run.
pub(super) const METRICS: &str = "metrics.jsonl";

/// The numeric top-level fields of one `metrics.jsonl` line.
pub(super) type MetricRow = Map<String, Value>;

fn metric_row(line: &[u8]) -> Result<MetricRow, String> {
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(o)) => Ok(o
            .into_iter()
            .filter(|(_, v)| v.is_number() || v.is_null())
            .collect()),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// One output directory being viewed.
#[derive(Debug)]
pub struct Run {
    /// Short name (the directory's last component, made unique by the caller).
    pub name: String,
    dir: PathBuf,
    trajectories: Mutex<JsonlIndex<TrajRow>>,
    metrics: Mutex<JsonlIndex<MetricRow>>,
    codec: OnceLock<Result<Arc<Codec>, String>>,
}

impl Run {
    /// A run over `dir`; nothing is read until the first refresh.
    pub fn new(name: String, dir: &Path) -> Self {
        Self {
            name,
            dir: dir.to_path_buf(),
            trajectories: Mutex::new(JsonlIndex::new(dir.join(TRAJECTORIES), row::extract)),
            metrics: Mutex::new(JsonlIndex::new(dir.join(METRICS), metric_row)),
            codec: OnceLock::new(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The trajectory index, brought up to date with the file or by [`REQUEST_BUDGET`] bytes,
    /// whichever comes first.
    pub fn trajectories(&self) -> Result<MutexGuard<'_, JsonlIndex<TrajRow>>, ViewError> {
        refreshed(&self.trajectories, REQUEST_BUDGET)
    }

    /// The metrics index, brought up to date like [`Run::trajectories`].
    pub fn metrics(&self) -> Result<MutexGuard<'_, JsonlIndex<MetricRow>>, ViewError> {
        refreshed(&self.metrics, REQUEST_BUDGET)
    }

    /// Indexes up to `budget` more bytes of each file; true when both caught up. Read errors
    /// become warnings of the index.
    pub fn index_some(&self, budget: u64) -> bool {
        let t = refreshed(&self.trajectories, budget).is_ok_and(|i| !i.is_behind());
        let m = refreshed(&self.metrics, budget).is_ok_and(|i| !i.is_behind());
        t && m
    }

    /// Warnings about the directory itself: missing, or holding none of the known files.
    pub fn dir_warnings(&self) -> Vec<String> {
        if !self.dir.is_dir() {
            return vec![format!(
                "{}: no such directory (nothing to show yet)",
                self.dir.display()
            )];
        }
        let known = [TRAJECTORIES, METRICS, SUMMARY];
        if known.iter().all(|f| !self.dir.join(f).exists()) {
            return vec![format!(
                "{}: none of {} yet",
                self.dir.display(),
                known.join(", ")
            )];
        }
        Vec::new()
    }

    /// `summary.json`, when present and valid (a warning otherwise).
    pub fn summary(&self) -> (Option<Value>, Option<String>) {
        let path = self.dir.join(SUMMARY);
        match std::fs::read(&path) {
            Err(_) => (None, None),
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(v) => (Some(v), None),
                Err(e) => (
                    None,
                    Some(format!("{}: not valid JSON ({e}); ignored", path.display())),
                ),
            },
        }
    }

    /// The run's tokenizer: `tokenizer.json` in the directory, in its `policy/` (a `train`
    /// run's export), or in the `model.dir` of its `config.yaml`. Loaded once.
    pub fn codec(&self) -> Result<Arc<Codec>, String> {
        self.codec
            .get_or_init(|| {
                let dir = tokenizer_dir(&self.dir).ok_or_else(|| {
                    "no tokenizer known for this run (token ids shown undecoded)".to_owned()
                })?;
                Codec::from_dir(&dir).map(Arc::new).map_err(|e| {
                    format!(
                        "tokenizer in {} could not be loaded ({e}); token ids shown undecoded",
                        dir.display()
                    )
                })
            })
            .clone()
    }
}

fn refreshed<T>(
    index: &Mutex<JsonlIndex<T>>,
    budget: u64,
) -> Result<MutexGuard<'_, JsonlIndex<T>>, ViewError> {
    // A panic elsewhere while holding the lock leaves a consistent index (refresh only
    // appends), so a poisoned lock is taken over.
    let mut guard = index.lock().unwrap_or_else(|p| p.into_inner());
    // An unreadable file is a warning (kept in the index), not a failed request.
    let _ = guard.refresh_some(budget);
    Ok(guard)
}

fn tokenizer_dir(dir: &Path) -> Option<PathBuf> {
    let has = |d: &Path| d.join("tokenizer.json").is_file();
    if has(dir) {
        return Some(dir.to_path_buf());
    }
    if has(&dir.join("policy")) {
        return Some(dir.join("policy"));
    }
    let config = std::fs::read_to_string(dir.join(crate::output::CONFIG)).ok()?;
    // A run directory is not trusted input: a deeply nested file must not stall the viewer.
    uniagent_core::config::check_nesting(&config).ok()?;
    let config: Value = serde_norway::from_str(&config).ok()?;
    let model_dir = config.get("model")?.get("dir")?.as_str()?;
    let model_dir = Path::new(model_dir);
    // A relative `model.dir` was relative to where the run started: try the run's parent
    // and the current directory.
    [
        dir.parent().map(|p| p.join(model_dir)),
        Some(model_dir.to_path_buf()),
    ]
    .into_iter()
    .flatten()
    .find(|d| has(d))
}
