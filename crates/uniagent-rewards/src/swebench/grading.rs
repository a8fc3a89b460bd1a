//! How the harness reads a test log and grades it: the package's `get_logs_eval`,
//! `get_eval_tests_report` and `get_resolution_status`.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::parsers::{compiled, Parser};
use super::pytext::universal_newlines;
use super::status::{Status, StatusMap};
use crate::error::RewardError;

/// Printed by the eval script right before the test command.
pub const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
/// Printed by the eval script right after the test command.
pub const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
/// Printed after the end marker with the test command's exit status.
pub const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";
/// Any of these in the log voids the run.
const BAD_CODES: [&str; 4] = [
    ">>>>> Patch Apply Failed",
    ">>>>> Reset Failed",
    ">>>>> Tests Errored",
    ">>>>> Tests Timed Out",
];

/// Evidence that a runner executed even though no result parsed (every count non-zero).
static SUITE_RAN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?m)Executed [1-9]\d* of \d+",
        r"|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)",
        r"|[1-9]\d* passing",
        r"|Tests:[\s\x1c-\x1f]+[1-9]\d*",
        r"|Test Suites:[\s\x1c-\x1f]+(?:\d+ \w+, )*[1-9]\d* total",
        r"|^# tests [1-9]\d*",
        r"|[1-9]\d* specs?, \d+ failures?",
        r"|': ok$",
    ))
    .ok()
});

static EXIT_CODE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r">>>>> Test Exit Code:[\s\x1c-\x1f]*(-?\d+)").ok());

/// Why a log was judged not to describe a valid test run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason", content = "detail")]
pub enum InvalidRun {
    /// One of the harness's failure markers (`>>>>> Patch Apply Failed`, ...).
    FailureMarker(String),
    /// The start or end test-output marker is missing.
    NoMarkers,
    /// Nothing parsed and nothing shows the suite ran.
    SuiteNeverRan,
    /// The test command exited non-zero, yet the log reports no failure.
    ExitCodeContradictsLog,
}

/// The result of reading one harness log (`get_logs_eval`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEval {
    /// The parsed statuses (empty when the run is invalid).
    pub status_map: StatusMap,
    /// `None` when the log describes a valid run ("found" in the package).
    pub invalid: Option<InvalidRun>,
}

impl LogEval {
    /// Whether the package would call this log found (a valid run).
    pub fn is_valid(&self) -> bool {
        self.invalid.is_none()
    }

    fn invalid(reason: InvalidRun) -> Self {
        Self {
            status_map: StatusMap::new(),
            invalid: Some(reason),
        }
    }
}

/// Reads a harness log as `get_logs_eval` does: universal newlines; void on a failure marker
/// or missing markers; parse between the markers, else the whole log; void when nothing parsed
/// and nothing shows the suite ran; void when the recorded exit status is non-zero and the log
/// shows no `FAILED`/`ERROR`.
pub fn eval_log(parser: Parser, content: &str) -> Result<LogEval, RewardError> {
    let content = universal_newlines(content);
    let content = content.as_ref();
    if let Some(code) = BAD_CODES.iter().find(|c| content.contains(*c)) {
        return Ok(LogEval::invalid(InvalidRun::FailureMarker(
            (*code).to_owned(),
        )));
    }
    if !(content.contains(START_TEST_OUTPUT) && content.contains(END_TEST_OUTPUT)) {
        return Ok(LogEval::invalid(InvalidRun::NoMarkers));
    }
    // `split(START)[1].split(END)[0]`: from the first start marker to the next start or end.
    let after_start = content.split(START_TEST_OUTPUT).nth(1).unwrap_or_default();
    let sliced = after_start
        .split(END_TEST_OUTPUT)
        .next()
        .unwrap_or_default();
    let mut status_map = parser.parse(sliced)?;
    if status_map.is_empty() {
        status_map = parser.parse(content)?;
    }
    if status_map.is_empty() && !compiled(&SUITE_RAN)?.is_match(content) {
        return Ok(LogEval::invalid(InvalidRun::SuiteNeverRan));
    }
    let exit_nonzero = recorded_exit_code_is_nonzero(content)?;
    if exit_nonzero
        && !status_map.is_empty()
        && !status_map
            .iter()
            .any(|(_, s)| matches!(s, Status::Failed | Status::Error))
    {
        return Ok(LogEval::invalid(InvalidRun::ExitCodeContradictsLog));
    }
    Ok(LogEval {
        status_map,
        invalid: None,
    })
}

/// The first recorded `>>>>> Test Exit Code: N` is present and not zero.
fn recorded_exit_code_is_nonzero(content: &str) -> Result<bool, RewardError> {
    let Some(caps) = compiled(&EXIT_CODE)?.captures(content) else {
        return Ok(false);
    };
    let digits = caps.get(1).map_or("", |m| m.as_str());
    // Python's int() accepts any Unicode decimal digits; only the zero value matters here.
    Ok(!digits
        .trim_start_matches('-')
        .chars()
        .all(|c| c.to_digit(10) == Some(0) || is_unicode_zero(c)))
}

/// The zero digit of a non-ASCII decimal digit block (each block starts at a code point
/// ending in 0 in every Unicode script the harness is likely to meet).
fn is_unicode_zero(c: char) -> bool {
    !c.is_ascii() && (c as u32).is_multiple_of(16) && c.is_numeric()
}

/// The four groups of tests a task lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestGroups {
    /// Tests the gold patch makes pass.
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    /// Tests that passed before and must still pass.
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    /// SWE-rebench: tests failing before and after the gold patch (reported, not graded).
    #[serde(rename = "FAIL_TO_FAIL", default)]
    pub fail_to_fail: Vec<String>,
    /// SWE-rebench: tests the gold patch breaks (reported, not graded).
    #[serde(rename = "PASS_TO_FAIL", default)]
    pub pass_to_fail: Vec<String>,
}

/// How tests are graded: the usual pass-and-fail, or fail-only (some JS repositories, where an
/// absent test counts as passing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalType {
    /// `pass_and_fail`
    #[default]
    PassAndFail,
    /// `fail_only`
    FailOnly,
}

/// Successes and failures of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupReport {
    /// Tests graded as passing (kept, for `PASS_TO_PASS`).
    pub success: Vec<String>,
    /// Tests graded as failing.
    pub failure: Vec<String>,
}

/// `get_eval_tests_report`'s result, keyed as the package keys it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestsReport {
    /// `FAIL_TO_PASS`
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: GroupReport,
    /// `PASS_TO_PASS`
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: GroupReport,
    /// `FAIL_TO_FAIL` (filled only when asked to grade the to-fail groups)
    #[serde(rename = "FAIL_TO_FAIL")]
    pub fail_to_fail: GroupReport,
    /// `PASS_TO_FAIL` (filled only when asked to grade the to-fail groups)
    #[serde(rename = "PASS_TO_FAIL")]
    pub pass_to_fail: GroupReport,
}

/// The resolution of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Resolution {
    /// Every `FAIL_TO_PASS` passes and every `PASS_TO_PASS` is kept.
    #[serde(rename = "RESOLVED_FULL")]
    Full,
    /// Some but not all `FAIL_TO_PASS` pass, every `PASS_TO_PASS` is kept.
    #[serde(rename = "RESOLVED_PARTIAL")]
    Partial,
    /// Anything else.
    #[serde(rename = "RESOLVED_NO")]
    No,
}

impl Resolution {
    /// The package's string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "RESOLVED_FULL",
            Self::Partial => "RESOLVED_PARTIAL",
            Self::No => "RESOLVED_NO",
        }
    }
}

impl TestsReport {
    /// Share of `FAIL_TO_PASS` graded passing (1 when none was graded either way).
    pub fn fail_to_pass_rate(&self) -> f64 {
        rate(&self.fail_to_pass)
    }

    /// Share of `PASS_TO_PASS` kept (1 when none was graded either way).
    pub fn pass_to_pass_rate(&self) -> f64 {
        rate(&self.pass_to_pass)
    }

    /// FULL, PARTIAL or NO (`get_resolution_status`).
    pub fn resolution(&self) -> Resolution {
        let (f2p, p2p) = (self.fail_to_pass_rate(), self.pass_to_pass_rate());
        if f2p == 1.0 && p2p == 1.0 {
            Resolution::Full
        } else if f2p > 0.0 && f2p < 1.0 && p2p == 1.0 {
            Resolution::Partial
        } else {
            Resolution::No
        }
    }
}

fn rate(group: &GroupReport) -> f64 {
    let total = group.success.len() + group.failure.len();
    if total == 0 {
        return 1.0;
    }
    group.success.len() as f64 / total as f64
}

/// The status-map entry for `case`: exact, or, for an id truncated inside its parameters
/// (more `[` than `]`), the first id it prefixes when all such ids agree on pass-vs-fail.
fn resolve<'m>(case: &str, map: &'m StatusMap) -> Option<&'m Status> {
    if let Some(status) = map.get(case) {
        return Some(status);
    }
    if case.matches('[').count() <= case.matches(']').count() {
        return None;
    }
    let mut matches = map.iter().filter(|(id, _)| id.starts_with(case));
    let (_, first) = matches.next()?;
    let passing = first.is_pass();
    matches
        .all(|(_, s)| s.is_pass() == passing)
        .then_some(first)
}

fn passed(case: &str, map: &StatusMap) -> bool {
    resolve(case, map).is_some_and(Status::is_pass)
}

fn maintained(case: &str, map: &StatusMap) -> bool {
    passed(case, map) || resolve(case, map) == Some(&Status::Skipped)
}

fn failed(case: &str, map: &StatusMap) -> bool {
    resolve(case, map).is_none_or(Status::is_fail)
}

/// Grades the groups against a status map (`get_eval_tests_report`). A test whose status is
/// neither passing nor failing (`XPASS`, odd words) lands in neither list, as in the package.
pub fn grade_tests(
    map: &StatusMap,
    groups: &TestGroups,
    eval_type: EvalType,
    calculate_to_fail: bool,
) -> TestsReport {
    let grade = |tests: &[String], keep_skipped: bool| {
        let mut report = GroupReport::default();
        for case in tests {
            let (ok, bad) = match eval_type {
                EvalType::FailOnly => {
                    let bad = map.get(case) == Some(&Status::Failed);
                    (!bad, bad)
                }
                EvalType::PassAndFail if keep_skipped => (maintained(case, map), failed(case, map)),
                EvalType::PassAndFail => (passed(case, map), failed(case, map)),
            };
            if ok {
                report.success.push(case.clone());
            } else if bad {
                report.failure.push(case.clone());
            }
        }
        report
    };
    let mut report = TestsReport {
        fail_to_pass: grade(&groups.fail_to_pass, false),
        pass_to_pass: grade(&groups.pass_to_pass, true),
        ..TestsReport::default()
    };
    if calculate_to_fail {
        report.fail_to_fail = grade(&groups.fail_to_fail, false);
        report.pass_to_fail = grade(&groups.pass_to_fail, false);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> StatusMap {
        let mut map = StatusMap::new();
        for (id, s) in entries {
            map.insert(*id, Status::from_word(s));
        }
        map
    }

    #[test]
    fn skipped_fails_f2p_but_keeps_p2p() {
        let m = map(&[("a", "SKIPPED"), ("b", "SKIPPED"), ("c", "XFAIL")]);
        let groups = TestGroups {
            fail_to_pass: vec!["a".into(), "c".into()],
            pass_to_pass: vec!["b".into()],
            ..TestGroups::default()
        };
        let report = grade_tests(&m, &groups, EvalType::PassAndFail, false);
        assert_eq!(report.fail_to_pass.failure, ["a"]);
        assert_eq!(report.fail_to_pass.success, ["c"]);
        assert_eq!(report.pass_to_pass.success, ["b"]);
        assert_eq!(report.resolution(), Resolution::Partial);
    }

    #[test]
    fn truncated_ids_match_by_prefix_only_when_unambiguous() {
        let m = map(&[
            ("t[a(1", "FAILED"),
            ("t[a(1)]", "PASSED"),
            ("u[x]", "PASSED"),
        ]);
        assert!(resolve("t[a(", &m).is_none());
        assert_eq!(resolve("u[", &m), Some(&Status::Passed));
        assert!(resolve("u", &m).is_none());
    }
}
