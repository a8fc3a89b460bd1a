//! Run checkpoints of the RL phase: `checkpoints/step-NNNNNN/` in the run folder holds the
//! trainer's checkpoint (policy, optimizer moments, step count) and `run_state.json` (task
//! cursor, weight version, the held-out evaluation before RL, SFT history, the step records
//! so far and the byte lengths of the record files). `checkpoints/latest` names the newest
//! complete one.
//!
//! A checkpoint is written under a temporary name and renamed when complete, and `latest` is
//! replaced by a rename too, so a run killed at any point leaves either the previous or the
//! new checkpoint, never half of one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uniagent_core::{Error, Result};

use super::config::PipelineConfig;
use super::rollouter::PendingGroups;
use super::run::{Evaluation, RlOutcome};
use super::tasks::TaskCursor;
use crate::trainer::Trainer;

/// The folder of run checkpoints inside the run folder.
pub(crate) const CHECKPOINTS: &str = "checkpoints";
const LATEST: &str = "latest";
const RUN_STATE: &str = "run_state.json";
/// Bumped when [`RunState`] changes incompatibly.
pub(crate) const FORMAT: u32 = 1;

/// Byte lengths of the record files when the checkpoint was taken: what a resumed run keeps
/// (lines written after it, possibly half a line from the kill, are cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordOffsets {
    pub(crate) trajectories: u64,
    pub(crate) metrics: u64,
}

/// Everything besides the trainer that the RL phase needs to continue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunState {
    pub(crate) format: u32,
    /// The configuration of the run (a resumed run must use the same, `rl.steps` aside).
    pub(crate) config: PipelineConfig,
    /// RL steps done.
    pub(crate) step: usize,
    /// Where the next RL task comes from.
    pub(crate) cursor: TaskCursor,
    /// The weight version the generator reported after the step's sync.
    pub(crate) weight_version: u64,
    /// Held-out evaluation before RL (`None` when the RL phase was run on its own).
    pub(crate) before: Option<Evaluation>,
    pub(crate) sft_losses: Vec<f64>,
    pub(crate) sft_probes: Vec<(usize, f64)>,
    /// Step records, curves and time accounting so far.
    pub(crate) outcome: RlOutcome,
    /// Seconds the trainer waited for rollouts so far.
    pub(crate) trainer_idle_s: f64,
    /// Seconds of training so far.
    pub(crate) train_s: f64,
    pub(crate) records: RecordOffsets,
    /// A deterministic async run: the finished groups not trained on yet and the syncs done
    /// (the cursor then stands after the last of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pending: Option<PendingGroups>,
}

/// A run checkpoint found on disk ([`Pipeline::latest_checkpoint`]), which
/// [`Pipeline::resume`] continues from.
///
/// [`Pipeline::latest_checkpoint`]: super::Pipeline::latest_checkpoint
/// [`Pipeline::resume`]: super::Pipeline::resume
#[derive(Debug)]
pub struct RunCheckpoint {
    /// The run's output folder.
    pub(crate) out: PathBuf,
    /// The checkpoint's own folder (`out/checkpoints/step-N`).
    pub(crate) dir: PathBuf,
    pub(crate) state: RunState,
}

impl RunCheckpoint {
    /// The RL step it was written after.
    pub fn step(&self) -> usize {
        self.state.step
    }

    /// Its folder (`OUT/checkpoints/step-N`: the weights, the optimizer and the run state).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The output folder of the run it belongs to.
    pub fn run_dir(&self) -> &Path {
        &self.out
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(what, e)
}

fn step_name(step: usize) -> String {
    format!("step-{step:06}")
}

/// Writes the checkpoint of `state.step`: the trainer's files and `run_state.json`, then
/// points `latest` at it and deletes all but the newest `keep`.
pub(crate) fn save(
    out: &Path,
    trainer: &Trainer,
    state: &RunState,
    keep: usize,
) -> Result<PathBuf> {
    let root = out.join(CHECKPOINTS);
    let name = step_name(state.step);
    let dir = root.join(&name);
    let tmp = root.join(format!(".{name}.partial"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(format!("removing {}", tmp.display())))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
    trainer.save_checkpoint(&tmp)?;
    let text = serde_json::to_string_pretty(state).map_err(|e| Error::internal(e.to_string()))?;
    std::fs::write(tmp.join(RUN_STATE), text).map_err(io(format!("writing {RUN_STATE}")))?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(format!("removing {}", dir.display())))?;
    }
    std::fs::rename(&tmp, &dir).map_err(io(format!("renaming to {}", dir.display())))?;
    let latest_tmp = root.join(format!(".{LATEST}.partial"));
    std::fs::write(&latest_tmp, &name).map_err(io(format!("writing {}", latest_tmp.display())))?;
    std::fs::rename(&latest_tmp, root.join(LATEST))
        .map_err(io(format!("replacing {}/{LATEST}", root.display())))?;
    prune(&root, keep.max(1))?;
    Ok(dir)
}

/// Deletes the oldest complete checkpoints beyond the newest `keep`.
fn prune(root: &Path, keep: usize) -> Result<()> {
    let mut steps: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(io(format!("listing {}", root.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-"))
        })
        .collect();
    steps.sort();
    let excess = steps.len().saturating_sub(keep);
    for old in &steps[..excess] {
        std::fs::remove_dir_all(old).map_err(io(format!("removing {}", old.display())))?;
    }
    Ok(())
}

/// The newest complete checkpoint of the run in `out`, if any.
pub(crate) fn latest(out: &Path) -> Result<Option<RunCheckpoint>> {
    let root = out.join(CHECKPOINTS);
    let pointer = root.join(LATEST);
    let name = match std::fs::read_to_string(&pointer) {
        Ok(name) => name,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {}", pointer.display()), e)),
    };
    let dir = root.join(name.trim());
    let path = dir.join(RUN_STATE);
    let text = std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
    let state: RunState = serde_json::from_str(&text)
        .map_err(|e| Error::invalid_input(format!("{}: {e}", path.display())))?;
    if state.format != FORMAT {
        return Err(Error::invalid_input(format!(
            "{}: checkpoint format {} (this build reads {FORMAT})",
            path.display(),
            state.format
        )));
    }
    Ok(Some(RunCheckpoint {
        out: out.to_path_buf(),
        dir,
        state,
    }))
}

/// Removes the checkpoints of an earlier run in `out` (a fresh run truncates its records,
/// which those checkpoints point into).
pub(crate) fn clear(out: &Path) -> Result<()> {
    let root = out.join(CHECKPOINTS);
    match std::fs::remove_dir_all(&root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("removing {}", root.display()), e)),
    }
}

/// Checks that `config` may continue the run of `saved`: equal in everything but `rl.steps`,
/// which may grow (train longer) but not fall below the steps done.
pub(crate) fn check_compatible(saved: &RunState, config: &PipelineConfig) -> Result<()> {
    if config.rl.steps < saved.step {
        return Err(Error::invalid_input(format!(
            "the checkpoint is at RL step {}, past rl.steps = {}",
            saved.step, config.rl.steps
        )));
    }
    let mut same = config.clone();
    same.rl.steps = saved.config.rl.steps;
    if same != saved.config {
        let (a, b) = (
            serde_json::to_value(&saved.config).unwrap_or_default(),
            serde_json::to_value(&same).unwrap_or_default(),
        );
        let mut differ = Vec::new();
        diff_keys("", &a, &b, &mut differ);
        return Err(Error::invalid_input(format!(
            "the configuration differs from the checkpointed run's in {} (only rl.steps may change on resume)",
            differ.join(", ")
        )));
    }
    Ok(())
}

/// Dotted keys whose values differ between `a` and `b`.
fn diff_keys(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    match (a, b) {
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            for (k, v) in x {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match y.get(k) {
                    Some(w) => diff_keys(&key, v, w, out),
                    None => out.push(key),
                }
            }
        }
        _ if a != b => out.push(prefix.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(step: usize) -> RunState {
        RunState {
            format: FORMAT,
            config: PipelineConfig::default(),
            step,
            cursor: TaskCursor { epoch: 0, index: 3 },
            weight_version: step as u64,
            before: Some(Evaluation {
                success: 0.25,
                reward: 0.5,
            }),
            sft_losses: vec![1.0, 0.5],
            sft_probes: vec![],
            outcome: RlOutcome::default(),
            trainer_idle_s: 0.0,
            train_s: 0.0,
            records: RecordOffsets {
                trajectories: 10,
                metrics: 20,
            },
            pending: None,
        }
    }

    #[test]
    fn only_rl_steps_may_change_and_only_upwards() {
        let saved = state(4);
        let mut c = PipelineConfig::default();
        assert!(check_compatible(&saved, &c).is_ok());
        c.rl.steps = saved.config.rl.steps + 10;
        assert!(check_compatible(&saved, &c).is_ok());
        c.rl.steps = 3;
        assert!(check_compatible(&saved, &c)
            .unwrap_err()
            .to_string()
            .contains("past rl.steps"));
        let mut c = PipelineConfig::default();
        c.rl.lr *= 2.0;
        c.seed += 1;
        let err = check_compatible(&saved, &c).unwrap_err().to_string();
        assert!(err.contains("rl.lr") && err.contains("seed"), "{err}");
    }

    #[test]
    fn pruning_keeps_the_newest_and_latest_names_a_complete_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(CHECKPOINTS);
        for step in [1, 2, 3] {
            std::fs::create_dir_all(root.join(step_name(step))).unwrap();
        }
        // A partial checkpoint of a killed run is not a step folder and is not counted.
        std::fs::create_dir_all(root.join(format!(".{}.partial", step_name(4)))).unwrap();
        prune(&root, 2).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [".step-000004.partial", "step-000002", "step-000003"]);
        assert!(latest(dir.path()).unwrap().is_none());
        std::fs::write(root.join(LATEST), step_name(3)).unwrap();
        std::fs::write(
            root.join(step_name(3)).join(RUN_STATE),
            serde_json::to_string(&state(3)).unwrap(),
        )
        .unwrap();
        let found = latest(dir.path()).unwrap().unwrap();
        assert_eq!(found.state.step, 3);
        assert_eq!(found.state.records.metrics, 20);
        clear(dir.path()).unwrap();
        assert!(latest(dir.path()).unwrap().is_none());
    }
}
