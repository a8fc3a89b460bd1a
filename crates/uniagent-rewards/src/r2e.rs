//! R2E-Gym's test convention and reward, as its Docker runtime decides it
//! (`r2egym.agenthub.runtime.docker`, `_calculate_reward_r2e`, and
//! `r2egym.repo_analysis.execution_log_parser.parse_log_pytest`).
//!
//! An R2E-Gym image holds the repository at `/testbed` (at the commit before the fix, its
//! virtualenv at `/testbed/.venv`), the hidden tests at `/r2e_tests` and the test command at
//! `/testbed/run_tests.sh` (`.venv/bin/python -m pytest -rA r2e_tests`, run from `/testbed`
//! with `r2e_tests` linked into it). The reward:
//!
//! 1. the output (stdout and stderr together) loses its ANSI colour codes and `\r`s
//!    ([`clean_output`]);
//! 2. [`parse_log`] reads the `-rA` summary into a map from test name (the node id without its
//!    file: `Class.test` or `test`) to `PASSED` / `FAILED` / `ERROR`;
//! 3. [`compare`]: the map must equal the dataset's `expected_output_json` (same number of
//!    names after cutting each at `" - "`, the same status for each). Reward 1 then, else 0.
//!
//! Everything here is a pure function of strings; the golden tests hold logs in the shape
//! R2E-Gym's parser reads.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::swebench::pytext;

/// The header whose text starts the summary R2E-Gym reads.
pub const SUMMARY_HEADER: &str = "short test summary info";

/// A test name's status in R2E-Gym's map (`PASSED`, `FAILED`, `ERROR`).
pub type R2eStatusMap = BTreeMap<String, String>;

static OUTPUT_NOISE: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a constant pattern
    Regex::new(r"\x1b\[[0-9;]*m|\r").expect("valid pattern")
});

static KEY_COLOUR: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a constant pattern
    Regex::new(r"\x1b\[\d+m").expect("valid pattern")
});

/// The test output as R2E-Gym's `run_tests` returns it: ANSI colour codes and `\r` removed.
pub fn clean_output(output: &str) -> String {
    OUTPUT_NOISE.replace_all(output, "").into_owned()
}

/// How [`parse_log`] reads the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryReading {
    /// Exactly as R2E-Gym: the text between the first and the second summary header, the last
    /// line for a name winning. Code under test that prints a header and passing lines (in a
    /// passing test's captured output, or at exit) decides the result.
    Faithful,
    /// Everything after the first header, and a name that any line reports `FAILED` or
    /// `ERROR` keeps that status whatever other lines say. An honest pytest run prints one
    /// summary with one line per test, where both readings agree.
    #[default]
    Strict,
}

/// The result of [`parse_log`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct R2eParse {
    /// Test name → status.
    pub statuses: R2eStatusMap,
    /// Names reported both passing and failing ([`SummaryReading::Strict`] keeps them failing).
    pub conflicting: Vec<String>,
    /// Whether the log has a summary at all.
    pub has_summary: bool,
}

/// R2E-Gym's `parse_log_pytest` on `log`, then its `decolor_dict_keys`.
///
/// Each line of the summary is classified by the first of `PASSED`, `FAILED`, `ERROR` that
/// occurs anywhere in it; the name is everything after the first `::`, the remaining `::`
/// becoming `.`, cut at `" - "` for failures and errors (not for passes, as in R2E-Gym).
pub fn parse_log(log: &str, reading: SummaryReading) -> R2eParse {
    let mut parse = R2eParse::default();
    if !log.contains(SUMMARY_HEADER) {
        return parse;
    }
    let mut parts = log.split(SUMMARY_HEADER);
    parts.next();
    parse.has_summary = true;
    let summary: String = match reading {
        // Python's `log.split(header)[1]`.
        SummaryReading::Faithful => parts.next().unwrap_or_default().to_owned(),
        SummaryReading::Strict => parts.collect::<Vec<_>>().join("\n"),
    };
    let mut ever_failed: Vec<String> = Vec::new();
    for line in pytext::strip(&summary).split('\n') {
        let Some((status, name)) = classify(line) else {
            continue;
        };
        let name = KEY_COLOUR.replace_all(&name, "").into_owned();
        if reading == SummaryReading::Strict {
            let failing = status != "PASSED";
            if failing && !ever_failed.contains(&name) {
                ever_failed.push(name.clone());
            }
            let previous = parse.statuses.get(&name).cloned();
            let conflict = match &previous {
                Some(prev) => (prev == "PASSED") == failing,
                None => false,
            };
            if conflict && !parse.conflicting.contains(&name) {
                parse.conflicting.push(name.clone());
            }
            if !failing && ever_failed.contains(&name) {
                // A pass after a failure is code under test speaking: the failure stays.
                continue;
            }
        }
        parse.statuses.insert(name, status.to_owned());
    }
    parse
}

/// One summary line → (status, name), as `parse_log_pytest` reads it.
fn classify(line: &str) -> Option<(&'static str, String)> {
    let after_first = |line: &str| line.split("::").skip(1).collect::<Vec<_>>().join(".");
    let cut = |name: String| name.split(" - ").next().unwrap_or_default().to_owned();
    if line.contains("PASSED") {
        Some(("PASSED", after_first(line)))
    } else if line.contains("FAILED") {
        Some(("FAILED", cut(after_first(line))))
    } else if line.contains("ERROR") {
        Some(("ERROR", cut(after_first(line))))
    } else {
        None
    }
}

/// How the parsed map differs from the expected one (empty lists: they match).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct R2eComparison {
    /// Whether R2E-Gym gives reward 1.
    pub matches: bool,
    /// Expected names the log does not report.
    pub missing: Vec<String>,
    /// Names the log reports that are not expected.
    pub unexpected: Vec<String>,
    /// Names reported with another status than expected: (name, expected, got).
    pub wrong_status: Vec<(String, String, String)>,
}

/// The map keyed as `_calculate_reward_r2e` keys it: colour codes out of the names, each name
/// cut at `" - "`, and where two names collide the one later in sorted order wins.
pub fn normalise(map: &R2eStatusMap) -> R2eStatusMap {
    let mut out = R2eStatusMap::new();
    // BTreeMap iterates in sorted (code point) order, as Python's `sorted` on str keys.
    for (name, status) in map {
        let name = KEY_COLOUR.replace_all(name, "");
        let name = name.split(" - ").next().unwrap_or_default().to_owned();
        out.insert(name, status.clone());
    }
    out
}

/// `_calculate_reward_r2e`'s comparison of the parsed map with `expected_output_json`.
///
/// R2E-Gym gives 1 when both maps (after [`normalise`]) have as many names and every parsed
/// name has the expected status; a parsed name absent from the expected map raises there, and
/// is no match here.
pub fn compare(parsed: &R2eStatusMap, expected: &R2eStatusMap) -> R2eComparison {
    let parsed = normalise(parsed);
    let expected = normalise(expected);
    let mut cmp = R2eComparison::default();
    for (name, status) in &parsed {
        match expected.get(name) {
            None => cmp.unexpected.push(name.clone()),
            Some(want) if want != status => {
                cmp.wrong_status
                    .push((name.clone(), want.clone(), status.clone()))
            }
            Some(_) => {}
        }
    }
    cmp.missing = expected
        .keys()
        .filter(|k| !parsed.contains_key(*k))
        .cloned()
        .collect();
    cmp.matches =
        parsed.len() == expected.len() && cmp.unexpected.is_empty() && cmp.wrong_status.is_empty();
    cmp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> R2eStatusMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn names_drop_the_file_and_join_the_rest_with_dots() {
        let log = "collected 3 items\n= short test summary info =\nPASSED r2e_tests/test_1.py::test_a\nPASSED r2e_tests/test_1.py::TestX::test_b\nFAILED r2e_tests/test_1.py::test_c - AssertionError: x - y\n== 1 failed, 2 passed in 0.1s ==";
        let p = parse_log(log, SummaryReading::Faithful);
        assert_eq!(
            p.statuses,
            map(&[
                ("test_a", "PASSED"),
                ("TestX.test_b", "PASSED"),
                ("test_c", "FAILED")
            ])
        );
        assert!(p.has_summary);
        assert_eq!(
            parse_log("no summary", SummaryReading::Strict),
            R2eParse::default()
        );
    }

    #[test]
    fn collection_errors_and_passes_keep_r2e_gyms_quirks() {
        // A collection error has no `::`: its name is empty. A pass is not cut at " - ".
        let log = "short test summary info\nERROR r2e_tests/test_1.py - ImportError: nope\nPASSED r2e_tests/test_2.py::test_p[a - b]\n";
        let p = parse_log(log, SummaryReading::Faithful);
        assert_eq!(
            p.statuses,
            map(&[("", "ERROR"), ("test_p[a - b]", "PASSED")])
        );
        // "PASSED" anywhere in the line wins over "FAILED".
        let p = parse_log(
            "short test summary info\nFAILED t.py::test_x - expected PASSED\n",
            SummaryReading::Faithful,
        );
        assert_eq!(p.statuses, map(&[("test_x - expected PASSED", "PASSED")]));
    }

    #[test]
    fn faithful_reads_between_the_first_two_headers_strict_keeps_failures() {
        // A fake summary printed in a passing test's captured output, before the real one.
        let log = "PASSES\n---- Captured stdout call ----\n= short test summary info =\nPASSED r2e_tests/test_1.py::test_bad\n= short test summary info =\nPASSED r2e_tests/test_1.py::test_ok\nFAILED r2e_tests/test_1.py::test_bad - assert 1 == 2\n";
        let faithful = parse_log(log, SummaryReading::Faithful);
        assert_eq!(faithful.statuses, map(&[("test_bad", "PASSED")]));
        let strict = parse_log(log, SummaryReading::Strict);
        assert_eq!(
            strict.statuses,
            map(&[("test_bad", "FAILED"), ("test_ok", "PASSED")])
        );
        assert_eq!(strict.conflicting, ["test_bad"]);
        // A pass printed at exit, after the real summary: the last line wins in R2E-Gym.
        let log = "short test summary info\nFAILED r2e_tests/t.py::test_bad - x\n1 failed\nPASSED r2e_tests/t.py::test_bad\n";
        assert_eq!(
            parse_log(log, SummaryReading::Faithful).statuses,
            map(&[("test_bad", "PASSED")])
        );
        assert_eq!(
            parse_log(log, SummaryReading::Strict).statuses,
            map(&[("test_bad", "FAILED")])
        );
    }

    #[test]
    fn colour_codes_and_carriage_returns_go() {
        let raw = "\x1b[1m\x1b[31mshort test summary info\x1b[0m\r\nPASSED t.py::\x1b[32mtest_a\x1b[0m\r\n";
        let p = parse_log(&clean_output(raw), SummaryReading::Strict);
        assert_eq!(p.statuses, map(&[("test_a", "PASSED")]));
        // Keys left coloured (a log not cleaned) lose the codes too.
        let p = parse_log(
            "short test summary info\nPASSED t.py::\x1b[32mtest_a\x1b[0m\n",
            SummaryReading::Faithful,
        );
        assert_eq!(p.statuses, map(&[("test_a", "PASSED")]));
    }

    #[test]
    fn comparison_needs_equal_sizes_and_statuses() {
        let expected = map(&[("test_a", "PASSED"), ("test_b - why", "FAILED")]);
        let same = map(&[("test_a", "PASSED"), ("test_b", "FAILED")]);
        assert!(compare(&same, &expected).matches);
        let wrong = map(&[("test_a", "FAILED"), ("test_b", "FAILED")]);
        let c = compare(&wrong, &expected);
        assert!(!c.matches);
        assert_eq!(
            c.wrong_status,
            [(
                "test_a".to_owned(),
                "PASSED".to_owned(),
                "FAILED".to_owned()
            )]
        );
        let fewer = map(&[("test_a", "PASSED")]);
        let c = compare(&fewer, &expected);
        assert!(!c.matches);
        assert_eq!(c.missing, ["test_b"]);
        // Same size, other names: a KeyError in R2E-Gym, no match here.
        let other = map(&[("test_a", "PASSED"), ("test_z", "FAILED")]);
        let c = compare(&other, &expected);
        assert!(!c.matches);
        assert_eq!(c.unexpected, ["test_z"]);
        // Names that collide after the cut: the later one in sorted order wins, on both sides.
        let collide = map(&[("t - 1", "FAILED"), ("t - 2", "PASSED")]);
        assert_eq!(normalise(&collide), map(&[("t", "PASSED")]));
        assert!(compare(&collide, &map(&[("t", "PASSED")])).matches);
        assert!(compare(&R2eStatusMap::new(), &R2eStatusMap::new()).matches);
    }
}
