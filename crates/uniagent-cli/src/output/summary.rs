//! `summary.json`: counts over every trajectory of the output directory.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{CliError, Result};
use crate::report::Report;
use crate::view::TrajRow;

/// The summary of an output directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Tasks in the run's dataset.
    pub tasks: usize,
    /// Finished rollouts in `trajectories.jsonl`.
    pub rollouts: u64,
    /// Tasks with at least one finished rollout.
    pub tasks_seen: usize,
    /// Rollouts whose reward says solved.
    pub succeeded: u64,
    /// `succeeded / rollouts` (0 without rollouts).
    pub success_rate: f64,
    /// Mean reward score over rollouts that have one (`null` when none has).
    pub mean_reward: Option<f64>,
    /// Rollouts per exit reason.
    pub exit_reasons: BTreeMap<String, u64>,
    /// Wall time of the last invocation, seconds.
    pub wall_time: f64,
    /// The report over the same lines: strict success, policy vs infrastructure failures,
    /// cost per success ([`Report`]; what `uniagent report` prints).
    pub report: Report,
}

/// Reads `trajectories` and counts.
pub fn summarize(trajectories: &Path, tasks: usize, wall_time: f64) -> Result<RunSummary> {
    let mut s = RunSummary {
        tasks,
        rollouts: 0,
        tasks_seen: 0,
        succeeded: 0,
        success_rate: 0.0,
        mean_reward: None,
        exit_reasons: BTreeMap::new(),
        wall_time,
        report: Report::build(&[]),
    };
    let Ok(file) = std::fs::File::open(trajectories) else {
        return Ok(s);
    };
    let mut rows = Vec::new();
    let mut seen = BTreeSet::new();
    let (mut reward_sum, mut rewarded) = (0.0, 0u64);
    for line in BufReader::new(file).lines() {
        let line = line
            .map_err(|e| CliError::runtime(format!("reading {}: {e}", trajectories.display())))?;
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Ok(row) = TrajRow::from_line(line.as_bytes()) {
            rows.push(row);
        }
        s.rollouts += 1;
        if let Some(task) = v.get("task_id").and_then(Value::as_str) {
            seen.insert(task.to_owned());
        }
        let reason = v
            .get("exit_reason")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        *s.exit_reasons.entry(reason.to_owned()).or_default() += 1;
        if let Some(r) = v.get("reward").filter(|r| r.is_object()) {
            if r.get("success").and_then(Value::as_bool) == Some(true) {
                s.succeeded += 1;
            }
            if let Some(score) = r.get("score").and_then(Value::as_f64) {
                reward_sum += score;
                rewarded += 1;
            }
        }
    }
    s.tasks_seen = seen.len();
    s.report = Report::build(&rows);
    if s.rollouts > 0 {
        s.success_rate = s.succeeded as f64 / s.rollouts as f64;
    }
    if rewarded > 0 {
        s.mean_reward = Some(reward_sum / rewarded as f64);
    }
    Ok(s)
}
