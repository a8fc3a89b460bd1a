//! `summary.json`: counts over every trajectory of the output directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{CliError, Result};
use crate::report::Report;
use crate::view::{read_rows, TrajRow};

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

/// Reads `trajectories` and counts (all zero when the file is not there yet).
pub(crate) fn summarize(trajectories: &Path, tasks: usize, wall_time: f64) -> Result<RunSummary> {
    let rows = match read_rows(trajectories) {
        Ok(rows) => rows,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(CliError::runtime(format!(
                "reading {}: {e}",
                trajectories.display()
            )))
        }
    };
    let rollouts = rows.len() as u64;
    let succeeded = rows.iter().filter(|r| r.success == Some(true)).count() as u64;
    let scores: Vec<f64> = rows.iter().filter_map(|r| r.score).collect();
    let tasks_seen: BTreeSet<&str> = rows.iter().map(|r| r.task_id.as_str()).collect();
    Ok(RunSummary {
        tasks,
        rollouts,
        tasks_seen: tasks_seen.len(),
        succeeded,
        success_rate: if rollouts > 0 {
            succeeded as f64 / rollouts as f64
        } else {
            0.0
        },
        mean_reward: (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64),
        exit_reasons: count_by(&rows, |r| r.exit_reason.as_str()),
        wall_time,
        report: Report::build(&rows),
    })
}

/// Rows per value of `key`.
pub(crate) fn count_by<'a>(
    rows: &'a [TrajRow],
    key: impl Fn(&'a TrajRow) -> &'a str,
) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for row in rows {
        *counts.entry(key(row).to_owned()).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_whole_trajectories_and_skips_blank_foreign_and_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trajectories.jsonl");
        let lines = [
            r#"{"id":"a:0","task_id":"a","exit_reason":"finished","reward":{"score":1.0,"success":true}}"#,
            "",
            r#"{"id":"a:1","task_id":"a","exit_reason":"max_turns","reward":{"score":0.0,"success":false}}"#,
            r#"{"not":"a trajectory"}"#,
            r#"{"id":"b:0","task_id":"b","exit_reason":"sandbox_error","reward":null}"#,
            r#"{"id":"c:0","task_id":"c","exit_re"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let s = summarize(&path, 5, 2.5).unwrap();
        assert_eq!(
            (s.tasks, s.rollouts, s.tasks_seen, s.succeeded),
            (5, 3, 2, 1)
        );
        assert!((s.success_rate - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.mean_reward, Some(0.5));
        let reasons: Vec<(&str, u64)> = s
            .exit_reasons
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        assert_eq!(
            reasons,
            [("finished", 1), ("max_turns", 1), ("sandbox_error", 1)]
        );

        let none = summarize(&dir.path().join("absent.jsonl"), 5, 0.0).unwrap();
        assert_eq!((none.rollouts, none.mean_reward), (0, None));
    }
}
