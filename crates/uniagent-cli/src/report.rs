//! [`Report`]: what an output directory of `run`, `train` or the gateway came to, in the terms
//! an RL report answers: tasks attempted, rollouts, the strict success rate, failures of the
//! policy versus failures of the infrastructure (by exit reason), and what a success cost in
//! tokens, tool calls and time; for a training run also the learning curve and the held-out
//! gain.
//!
//! One builder serves every reader: `uniagent report` ([`Report::from_dir`], printed with
//! [`render_table`] or as JSON), `summary.json` (the `report` object) and the viewer's run
//! page (built from its index rows, shown as the same [`table_rows`]).
//!
//! ```
//! use uniagent_cli::report::Report;
//! use uniagent_cli::view::TrajRow;
//!
//! let lines = [
//!     r#"{"task_id":"a","exit_reason":"finished","reward":{"score":1.0,"success":true},
//!         "counts":{"tool_calls":2,"sampled_tokens":40},"timings":{"total":3.0}}"#,
//!     r#"{"task_id":"a","exit_reason":"max_turns","reward":{"score":0.0,"success":false}}"#,
//!     r#"{"task_id":"b","exit_reason":"sandbox_error"}"#,
//! ];
//! let rows: Vec<TrajRow> = lines.iter().map(|l| TrajRow::from_line(l.as_bytes()).unwrap()).collect();
//! let r = Report::build(&rows);
//! assert_eq!((r.tasks_attempted, r.rollouts, r.successes), (2, 3, 1));
//! assert_eq!(r.policy_failures.total, 1);
//! assert_eq!(r.infrastructure_failures.by_reason["sandbox_error"], 1);
//! assert_eq!(r.per_success.tool_calls, Some(2.0));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uniagent_core::agent::{ExitClass, ExitReason};

use crate::output::TRAJECTORIES;
use crate::view::{read_rows, TrajRow};

/// Why a report could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Neither the path nor a `trajectories.jsonl` in it exists.
    #[error("{}: no trajectories.jsonl there (not an output directory of run, train or the gateway)", .path.display())]
    NoTrajectories {
        /// The path given.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("reading {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Which output a report was built from, and so which rollouts it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `run` or the gateway: every line counts.
    Run,
    /// `train` (lines carry a `phase`): the `rl` phase counts; `eval` lines give the held-out
    /// gain; demonstrations and SFT probes are not the policy's rollouts and are left out.
    Train,
}

/// Unsolved rollouts of one class.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Failures {
    /// Unsolved rollouts of the class.
    pub total: u64,
    /// The same, by exit reason. For policy failures `finished` and `submitted` are rollouts
    /// the agent ended with an answer the reward did not accept.
    pub by_reason: BTreeMap<String, u64>,
}

impl Failures {
    fn add(&mut self, reason: &str) {
        self.total += 1;
        *self.by_reason.entry(reason.to_owned()).or_default() += 1;
    }
}

/// Means over the successful rollouts; `None` when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PerSuccess {
    /// Tokens the policy generated (`counts.sampled_tokens`, or the mask-1 tokens when the
    /// line has token data; 0 from backends that report no usage).
    pub tokens_generated: Option<f64>,
    /// Tool calls executed (`counts.tool_calls`).
    pub tool_calls: Option<f64>,
    /// Wall time of the rollout, seconds (`timings.total`).
    pub wall_time_s: Option<f64>,
}

/// Success of the rollouts of one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepSuccess {
    /// The step (RL step; for evaluations, RL steps done, 0 before RL).
    pub step: u64,
    /// Rollouts of the step.
    pub rollouts: u64,
    /// Their strict success rate.
    pub success_rate: f64,
}

/// The held-out evaluation before and after.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeldOutGain {
    /// The first evaluation.
    pub first: StepSuccess,
    /// The last evaluation.
    pub last: StepSuccess,
    /// `last.success_rate − first.success_rate`, in percentage points.
    pub gain_points: f64,
}

/// What only a training run has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Training {
    /// Strict success of the `rl` rollouts of each step, ascending.
    pub curve: Vec<StepSuccess>,
    /// Held-out success at every evaluation (`eval` lines by step), ascending.
    pub evaluations: Vec<StepSuccess>,
    /// First versus last evaluation; `None` with fewer than two.
    pub held_out: Option<HeldOutGain>,
}

/// The report of one output directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Which output it was built from.
    pub source: Source,
    /// Distinct tasks among the counted rollouts.
    pub tasks_attempted: u64,
    /// Counted rollouts (failed ones included).
    pub rollouts: u64,
    /// Rollouts whose reward says solved.
    pub successes: u64,
    /// `successes / rollouts` over every counted rollout, failures of either kind included;
    /// `None` without rollouts.
    pub strict_success_rate: Option<f64>,
    /// Unsolved rollouts whose ending was the policy's: it answered wrongly, or ran into a
    /// limit ([`ExitClass::Agent`] and [`ExitClass::Policy`]).
    pub policy_failures: Failures,
    /// Unsolved rollouts whose ending was the infrastructure's ([`ExitClass::Infrastructure`];
    /// also an exit reason this version does not know).
    pub infrastructure_failures: Failures,
    /// What a success cost.
    pub per_success: PerSuccess,
    /// Curve and held-out gain, for a training run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<Training>,
}

#[derive(Default)]
struct Tally {
    rollouts: u64,
    successes: u64,
}

impl Tally {
    fn add(&mut self, success: bool) {
        self.rollouts += 1;
        self.successes += u64::from(success);
    }

    fn at(&self, step: u64) -> StepSuccess {
        StepSuccess {
            step,
            rollouts: self.rollouts,
            success_rate: ratio(self.successes, self.rollouts).unwrap_or(0.0),
        }
    }
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

impl Report {
    /// The report over `rows` (the lines of one `trajectories.jsonl`, in file order).
    pub fn build<'a>(rows: impl IntoIterator<Item = &'a TrajRow>) -> Self {
        let rows: Vec<&TrajRow> = rows.into_iter().collect();
        let source = match rows.iter().any(|r| r.phase.is_some()) {
            true => Source::Train,
            false => Source::Run,
        };
        let mut tasks = BTreeSet::new();
        let mut report = Report {
            source,
            tasks_attempted: 0,
            rollouts: 0,
            successes: 0,
            strict_success_rate: None,
            policy_failures: Failures::default(),
            infrastructure_failures: Failures::default(),
            per_success: PerSuccess::default(),
            training: None,
        };
        let (mut tokens, mut tools, mut wall) = (0.0, 0.0, 0.0);
        let mut curve: BTreeMap<u64, Tally> = BTreeMap::new();
        let mut evals: BTreeMap<u64, Tally> = BTreeMap::new();
        for r in rows {
            let success = r.success == Some(true);
            if source == Source::Train {
                match r.phase.as_deref() {
                    Some("rl") => curve.entry(r.step.unwrap_or(0)).or_default().add(success),
                    Some("eval") => {
                        evals.entry(r.step.unwrap_or(0)).or_default().add(success);
                        continue;
                    }
                    _ => continue,
                }
            }
            tasks.insert(r.task_id.as_str());
            report.rollouts += 1;
            if success {
                report.successes += 1;
                tokens += r.sampled_tokens as f64;
                tools += r.tool_calls as f64;
                wall += r.timings.total;
                continue;
            }
            let class = serde_json::from_value::<ExitReason>(r.exit_reason.clone().into())
                .map_or(ExitClass::Infrastructure, ExitReason::class);
            match class {
                ExitClass::Agent | ExitClass::Policy => report.policy_failures.add(&r.exit_reason),
                ExitClass::Infrastructure => report.infrastructure_failures.add(&r.exit_reason),
            }
        }
        report.tasks_attempted = tasks.len() as u64;
        report.strict_success_rate = ratio(report.successes, report.rollouts);
        if report.successes > 0 {
            let n = report.successes as f64;
            report.per_success = PerSuccess {
                tokens_generated: Some(tokens / n),
                tool_calls: Some(tools / n),
                wall_time_s: Some(wall / n),
            };
        }
        if source == Source::Train {
            let evaluations: Vec<StepSuccess> = evals.iter().map(|(s, t)| t.at(*s)).collect();
            let held_out = match (evaluations.first(), evaluations.last()) {
                (Some(first), Some(last)) if evaluations.len() >= 2 => Some(HeldOutGain {
                    first: *first,
                    last: *last,
                    gain_points: (last.success_rate - first.success_rate) * 100.0,
                }),
                _ => None,
            };
            report.training = Some(Training {
                curve: curve.iter().map(|(s, t)| t.at(*s)).collect(),
                evaluations,
                held_out,
            });
        }
        report
    }

    /// The report of the output directory `path` (or of the `trajectories.jsonl` file it
    /// names). Lines that are not trajectories (a line still being written, a corrupt one) are
    /// skipped, as everywhere that reads the file.
    pub fn from_dir(path: &Path) -> Result<Self, ReportError> {
        let file_path = if path.is_dir() {
            path.join(TRAJECTORIES)
        } else {
            path.to_path_buf()
        };
        let rows = read_rows(&file_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ReportError::NoTrajectories {
                path: path.to_path_buf(),
            },
            _ => ReportError::Read {
                path: file_path.clone(),
                source: e,
            },
        })?;
        Ok(Self::build(&rows))
    }
}

/// One row of the report table: a label and one cell per report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableRow {
    /// What the row shows; a failure class's reasons are indented by two spaces.
    pub label: String,
    /// One cell per report, in the order given.
    pub cells: Vec<String>,
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |x| format!("{:.1}%", 100.0 * x))
}

fn num(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "–".to_owned(), |x| format!("{x:.decimals$}"))
}

/// At most `n` points of `curve`, evenly spread, first and last included.
fn sampled(curve: &[StepSuccess], n: usize) -> Vec<StepSuccess> {
    if curve.len() <= n || n < 2 {
        return curve.to_vec();
    }
    (0..n)
        .map(|i| curve[i * (curve.len() - 1) / (n - 1)])
        .collect()
}

/// Picks one class of failures out of a report.
type FailuresOf = fn(&Report) -> &Failures;

/// The report table: one row per quantity, one column per report. The terminal table of
/// `uniagent report` and the viewer's run page both show these rows.
pub fn table_rows(reports: &[&Report]) -> Vec<TableRow> {
    let mut rows = Vec::new();
    let mut row = |label: &str, cell: &dyn Fn(&Report) -> String| {
        rows.push(TableRow {
            label: label.to_owned(),
            cells: reports.iter().map(|r| cell(r)).collect(),
        });
    };
    row("source", &|r| match r.source {
        Source::Run => "run".to_owned(),
        Source::Train => "train (rl phase)".to_owned(),
    });
    row("tasks attempted", &|r| r.tasks_attempted.to_string());
    row("rollouts", &|r| r.rollouts.to_string());
    row("successes", &|r| r.successes.to_string());
    row("strict success rate", &|r| pct(r.strict_success_rate));
    let classes: [(&str, FailuresOf); 2] = [
        ("policy failures", |r| &r.policy_failures),
        ("infrastructure failures", |r| &r.infrastructure_failures),
    ];
    for (label, failures) in classes {
        row(label, &|r| failures(r).total.to_string());
        let reasons: BTreeSet<&String> = reports
            .iter()
            .flat_map(|r| failures(r).by_reason.keys())
            .collect();
        for reason in reasons {
            row(&format!("  {reason}"), &|r| {
                failures(r)
                    .by_reason
                    .get(reason)
                    .copied()
                    .unwrap_or(0)
                    .to_string()
            });
        }
    }
    row("tokens generated per success", &|r| {
        num(r.per_success.tokens_generated, 1)
    });
    row("tool calls per success", &|r| {
        num(r.per_success.tool_calls, 2)
    });
    row("wall time per success (s)", &|r| {
        num(r.per_success.wall_time_s, 2)
    });
    if reports.iter().any(|r| r.training.is_some()) {
        row("learning curve (rl success by step)", &|r| {
            let Some(t) = &r.training else {
                return "–".to_owned();
            };
            if t.curve.is_empty() {
                return "–".to_owned();
            }
            sampled(&t.curve, 6)
                .iter()
                .map(|p| format!("{}: {}", p.step, pct(Some(p.success_rate))))
                .collect::<Vec<_>>()
                .join(" · ")
        });
        row("held-out success (first → last)", &|r| match r
            .training
            .as_ref()
            .and_then(|t| t.held_out)
        {
            Some(h) => format!(
                "{} (step {}) → {} (step {})",
                pct(Some(h.first.success_rate)),
                h.first.step,
                pct(Some(h.last.success_rate)),
                h.last.step
            ),
            None => "–".to_owned(),
        });
        row(
            "held-out gain",
            &|r| match r.training.as_ref().and_then(|t| t.held_out) {
                Some(h) => format!("{:+.1} points", h.gain_points),
                None => "–".to_owned(),
            },
        );
    }
    rows
}

/// The table as text: a header of `names` (one per report), then [`table_rows`], columns
/// padded to their widest cell.
pub fn render_table(names: &[String], reports: &[&Report]) -> String {
    let rows = table_rows(reports);
    let mut lines: Vec<Vec<String>> = vec![std::iter::once(String::new())
        .chain(names.iter().cloned())
        .collect()];
    lines.extend(
        rows.into_iter()
            .map(|r| std::iter::once(r.label).chain(r.cells).collect::<Vec<_>>()),
    );
    let columns = names.len() + 1;
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            lines
                .iter()
                .map(|l| l.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (s, w))| {
                let pad = w.saturating_sub(s.chars().count());
                // Labels left-aligned, values right-aligned.
                match i {
                    0 => format!("{s}{}", " ".repeat(pad)),
                    _ => format!("{}{s}", " ".repeat(pad)),
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{json, Value};

    use super::*;

    fn row(v: Value) -> TrajRow {
        TrajRow::from_line(v.to_string().as_bytes()).unwrap()
    }

    fn solved(task: &str, tokens: u64, tools: u64, secs: f64) -> Value {
        json!({"task_id": task, "exit_reason": "finished",
               "reward": {"score": 1.0, "success": true},
               "counts": {"sampled_tokens": tokens, "tool_calls": tools, "turns": 2},
               "timings": {"total": secs}})
    }

    fn failed(task: &str, reason: &str, rewarded: bool) -> Value {
        let mut v = json!({"task_id": task, "exit_reason": reason,
                           "counts": {"sampled_tokens": 999, "tool_calls": 9},
                           "timings": {"total": 99.0}});
        if rewarded {
            v["reward"] = json!({"score": 0.0, "success": false});
        }
        v
    }

    #[test]
    fn counts_classify_failures_and_average_over_successes_only() {
        let rows: Vec<TrajRow> = [
            solved("a", 10, 1, 2.0),
            solved("b", 30, 3, 4.0),
            failed("a", "finished", true),
            failed("b", "max_turns", true),
            failed("c", "format_error_budget", false),
            failed("c", "sandbox_error", false),
            failed("d", "model_error", false),
            failed("d", "some_future_reason", false),
        ]
        .into_iter()
        .map(row)
        .collect();
        let r = Report::build(&rows);
        assert_eq!(r.source, Source::Run);
        assert_eq!(r.tasks_attempted, 4);
        assert_eq!(r.rollouts, 8);
        assert_eq!(r.successes, 2);
        assert_eq!(r.strict_success_rate, Some(0.25));
        assert_eq!(r.policy_failures.total, 3);
        assert_eq!(
            r.policy_failures.by_reason,
            BTreeMap::from([
                ("finished".into(), 1),
                ("format_error_budget".into(), 1),
                ("max_turns".into(), 1)
            ])
        );
        assert_eq!(r.infrastructure_failures.total, 3);
        assert_eq!(r.infrastructure_failures.by_reason["some_future_reason"], 1);
        // Failures' costs (999 tokens, 9 calls, 99 s) stay out of the per-success means.
        assert_eq!(
            r.per_success,
            PerSuccess {
                tokens_generated: Some(20.0),
                tool_calls: Some(2.0),
                wall_time_s: Some(3.0)
            }
        );
        assert!(r.training.is_none());
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("training").is_none(), "{json}");
    }

    #[test]
    fn a_success_counts_whatever_the_exit_reason_and_nothing_is_zero_when_absent() {
        // The reward is the judge: a solved rollout that then hit the wall clock is a success.
        let mut late = solved("a", 5, 1, 1.0);
        late["exit_reason"] = json!("wall_clock_timeout");
        let r = Report::build(&[row(late)]);
        assert_eq!((r.successes, r.infrastructure_failures.total), (1, 0));

        let empty = Report::build(&[]);
        assert_eq!(empty.strict_success_rate, None);
        assert_eq!(empty.per_success, PerSuccess::default());
        let none = Report::build(&[row(failed("a", "max_turns", true))]);
        assert_eq!(none.strict_success_rate, Some(0.0));
        assert_eq!(none.per_success.tokens_generated, None);
        let json = serde_json::to_value(&none).unwrap();
        assert_eq!(json["per_success"]["tool_calls"], Value::Null);
    }

    fn tagged(mut v: Value, phase: &str, step: u64) -> Value {
        v["phase"] = json!(phase);
        v["step"] = json!(step);
        v
    }

    #[test]
    fn a_training_run_counts_rl_rollouts_and_reports_curve_and_held_out_gain() {
        let rows: Vec<TrajRow> = [
            tagged(solved("demo", 1, 1, 1.0), "demonstration", 0),
            tagged(failed("h1", "finished", true), "eval", 0),
            tagged(failed("h2", "max_turns", true), "eval", 0),
            tagged(solved("h1", 1, 1, 1.0), "eval", 0),
            tagged(failed("p", "finished", true), "sft_probe", 4),
            tagged(failed("t1", "finished", true), "rl", 1),
            tagged(solved("t2", 8, 2, 1.0), "rl", 1),
            tagged(solved("t3", 12, 2, 3.0), "rl", 2),
            tagged(solved("t3", 12, 2, 3.0), "rl", 2),
            tagged(solved("h1", 1, 1, 1.0), "eval", 2),
            tagged(solved("h2", 1, 1, 1.0), "eval", 2),
            tagged(failed("h3", "model_error", false), "eval", 2),
        ]
        .into_iter()
        .map(row)
        .collect();
        let r = Report::build(&rows);
        assert_eq!(r.source, Source::Train);
        assert_eq!((r.tasks_attempted, r.rollouts, r.successes), (3, 4, 3));
        assert_eq!(r.strict_success_rate, Some(0.75));
        assert_eq!(r.policy_failures.total, 1);
        assert_eq!(r.per_success.tokens_generated, Some(32.0 / 3.0));
        let t = r.training.unwrap();
        assert_eq!(
            t.curve,
            vec![
                StepSuccess {
                    step: 1,
                    rollouts: 2,
                    success_rate: 0.5
                },
                StepSuccess {
                    step: 2,
                    rollouts: 2,
                    success_rate: 1.0
                }
            ]
        );
        let h = t.held_out.unwrap();
        assert_eq!((h.first.step, h.last.step), (0, 2));
        assert!((h.first.success_rate - 1.0 / 3.0).abs() < 1e-12);
        assert!((h.last.success_rate - 2.0 / 3.0).abs() < 1e-12);
        assert!((h.gain_points - 100.0 / 3.0).abs() < 1e-9);

        // One evaluation: nothing to compare.
        let one = Report::build(&rows[..4]);
        assert_eq!(one.training.unwrap().held_out, None);
    }

    #[test]
    fn the_table_has_a_column_per_report_and_the_union_of_reasons() {
        let a = Report::build(&[
            row(solved("a", 10, 1, 2.0)),
            row(failed("b", "max_turns", true)),
        ]);
        let b = Report::build(&[row(failed("a", "sandbox_error", false))]);
        let rows = table_rows(&[&a, &b]);
        let find = |label: &str| {
            rows.iter()
                .find(|r| r.label == label)
                .unwrap_or_else(|| panic!("no row {label}: {rows:?}"))
                .cells
                .clone()
        };
        assert_eq!(find("strict success rate"), ["50.0%", "0.0%"]);
        assert_eq!(find("policy failures"), ["1", "0"]);
        assert_eq!(find("  max_turns"), ["1", "0"]);
        assert_eq!(find("  sandbox_error"), ["0", "1"]);
        assert_eq!(find("tokens generated per success"), ["10.0", "–"]);
        assert!(!rows.iter().any(|r| r.label.starts_with("held-out")));

        let text = render_table(&["a".into(), "b".into()], &[&a, &b]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), rows.len() + 1);
        assert!(lines[0].ends_with('b'), "{text}");
        let success = lines
            .iter()
            .find(|l| l.starts_with("strict success rate"))
            .unwrap();
        assert_eq!(
            success.split_whitespace().collect::<Vec<_>>(),
            ["strict", "success", "rate", "50.0%", "0.0%"]
        );
        // Every value column is right-aligned to the same edge.
        let width = lines[0].chars().count();
        assert!(lines.iter().all(|l| l.chars().count() == width), "{text}");
    }

    #[test]
    fn a_long_curve_is_sampled_first_and_last_kept() {
        let curve: Vec<StepSuccess> = (1..=100)
            .map(|s| StepSuccess {
                step: s,
                rollouts: 1,
                success_rate: 0.0,
            })
            .collect();
        let steps: Vec<u64> = sampled(&curve, 6).iter().map(|p| p.step).collect();
        assert_eq!(steps, [1, 20, 40, 60, 80, 100]);
    }

    #[test]
    fn reads_a_directory_and_says_which_path_has_no_trajectories() {
        let dir = tempfile::tempdir().unwrap();
        let lines = format!(
            "{}\n{{\"half a line\n{}\n",
            solved("a", 4, 1, 1.0),
            failed("b", "max_turns", true)
        );
        std::fs::write(dir.path().join(TRAJECTORIES), lines).unwrap();
        let r = Report::from_dir(dir.path()).unwrap();
        assert_eq!((r.rollouts, r.successes), (2, 1));
        assert_eq!(Report::from_dir(&dir.path().join(TRAJECTORIES)).unwrap(), r);
        let missing = dir.path().join("nope");
        let e = Report::from_dir(&missing).unwrap_err();
        assert!(matches!(e, ReportError::NoTrajectories { .. }), "{e}");
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
