//! Reading per-test results out of a test runner's log: pytest (`-rA` summary lines and `-v`
//! progress lines, also with `pytest-xdist` prefixes) and Python's unittest (`-v`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One test's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TestStatus {
    /// It passed.
    Passed,
    /// An assertion failed.
    Failed,
    /// It raised outside an assertion, or its setup failed.
    Error,
    /// It was skipped.
    Skipped,
    /// It failed and was expected to (counts as a pass, as in SWE-bench).
    #[serde(rename = "XFAIL")]
    XFail,
    /// It passed and was expected to fail.
    #[serde(rename = "XPASS")]
    XPass,
}

impl TestStatus {
    /// Whether the test counts as passing (SWE-bench: passed or expected failure).
    pub fn counts_as_pass(self) -> bool {
        matches!(self, Self::Passed | Self::XFail)
    }

    /// pytest's word for the status.
    pub fn pytest_word(self) -> &'static str {
        match self {
            Self::Passed => "PASSED",
            Self::Failed => "FAILED",
            Self::Error => "ERROR",
            Self::Skipped => "SKIPPED",
            Self::XFail => "XFAIL",
            Self::XPass => "XPASS",
        }
    }

    /// unittest's word for the status (after ` ... `).
    pub fn unittest_word(self) -> &'static str {
        match self {
            Self::Passed => "ok",
            Self::Failed => "FAIL",
            Self::Error => "ERROR",
            Self::Skipped => "skipped",
            Self::XFail => "expected failure",
            Self::XPass => "unexpected success",
        }
    }

    const ALL: [Self; 6] = [
        Self::Passed,
        Self::Failed,
        Self::Error,
        Self::Skipped,
        Self::XFail,
        Self::XPass,
    ];
}

/// Which runner wrote the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Both parsers; their line shapes do not overlap.
    #[default]
    Auto,
    /// pytest (run it with `-rA` so every result has a summary line).
    Pytest,
    /// `python -m unittest -v` (and Django's runner, which prints the same lines).
    Unittest,
}

/// Every test result found in `log`, by test id. A test reported twice keeps its last status.
///
/// Test ids are the runner's own: `path::name[params]` for pytest,
/// `name (module.Class[.name])` for unittest. Lines that are not results are ignored; the
/// parser never fails.
///
/// ```
/// use uniagent_rewards::suite::{parse_test_log, LogFormat, TestStatus};
/// let log = "tests/t.py::test_a PASSED [ 50%]\nFAILED tests/t.py::test_b - assert 1 == 2\n";
/// let results = parse_test_log(log, LogFormat::Auto);
/// assert_eq!(results["tests/t.py::test_a"], TestStatus::Passed);
/// assert_eq!(results["tests/t.py::test_b"], TestStatus::Failed);
/// ```
pub fn parse_test_log(log: &str, format: LogFormat) -> BTreeMap<String, TestStatus> {
    let mut results = BTreeMap::new();
    let pytest = matches!(format, LogFormat::Auto | LogFormat::Pytest);
    let unittest = matches!(format, LogFormat::Auto | LogFormat::Unittest);
    let mut header: Option<&str> = None;
    for raw in log.lines() {
        let line = raw.trim_end_matches('\r');
        if pytest {
            if let Some((name, status)) = pytest_line(line) {
                results.insert(name.to_owned(), status);
                header = None;
                continue;
            }
        }
        if unittest {
            match unittest_line(line, header) {
                UnittestLine::Result(name, status) => {
                    results.insert(name, status);
                    header = None;
                }
                UnittestLine::Header(name) => header = Some(name),
                UnittestLine::Other => header = None,
            }
        }
    }
    results
}

/// `STATUS id[ - message]` (the `-rA` summary) or `id STATUS[ [ nn%]]` (`-v` progress).
fn pytest_line(line: &str) -> Option<(&str, TestStatus)> {
    let line = strip_xdist_prefixes(line.trim_start());
    for status in TestStatus::ALL {
        if let Some(rest) = line
            .strip_prefix(status.pytest_word())
            .and_then(|r| r.strip_prefix(' '))
        {
            // `SKIPPED [1] path:line: reason` names a location, not a test.
            if rest.starts_with('[') {
                return None;
            }
            let name = summary_test_id(rest);
            return is_pytest_id(name).then_some((name, status));
        }
    }
    // Progress line: the id contains `::`, then the status word, then nothing or `[ nn%]`.
    for status in TestStatus::ALL {
        let word = status.pytest_word();
        let mut search_end = line.len();
        while let Some(at) = line[..search_end].rfind(word) {
            search_end = at;
            let before = &line[..at];
            let after = line[at + word.len()..].trim();
            if before.ends_with(' ') && (after.is_empty() || after.starts_with('[')) {
                let name = before.trim_end();
                if is_pytest_id(name) && name.contains("::") {
                    return Some((name, status));
                }
            }
        }
    }
    None
}

/// `path::name[params]`, or a bare `path.py` (a collection error): no whitespace before the
/// parameters.
fn is_pytest_id(id: &str) -> bool {
    let base = id.split('[').next().unwrap_or_default();
    !base.is_empty()
        && !base.contains(char::is_whitespace)
        && (base.contains("::") || base.ends_with(".py"))
}

/// The test id of a summary line's remainder: up to ` - message`, but a parametrised id's
/// brackets may themselves contain ` - `.
fn summary_test_id(rest: &str) -> &str {
    let rest = rest.trim();
    let id_end = match rest.find('[') {
        Some(open) if !rest[..open].contains(" - ") => rest[open..]
            .find(']')
            .map_or(rest.len(), |close| open + close + 1),
        _ => rest.find(" - ").unwrap_or(rest.len()),
    };
    rest[..id_end].trim_end()
}

/// Drops `[gw3] ` and `[ 42%] ` prefixes that pytest-xdist prints before the status.
fn strip_xdist_prefixes(mut line: &str) -> &str {
    loop {
        let Some(rest) = line.strip_prefix('[') else {
            return line;
        };
        let Some(close) = rest.find(']') else {
            return line;
        };
        let inner = rest[..close].trim();
        let is_worker = inner
            .strip_prefix("gw")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let is_percent = inner
            .strip_suffix('%')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !(is_worker || is_percent) {
            return line;
        }
        line = rest[close + 1..].trim_start();
    }
}

enum UnittestLine<'a> {
    Result(String, TestStatus),
    /// `name (module.Class)` alone on a line: the first docstring line follows with the status.
    Header(&'a str),
    Other,
}

fn unittest_line<'a>(line: &'a str, header: Option<&str>) -> UnittestLine<'a> {
    let Some((head, tail)) = line.rsplit_once(" ... ") else {
        return if is_unittest_id(line) {
            UnittestLine::Header(line)
        } else {
            UnittestLine::Other
        };
    };
    let tail = tail.trim();
    let status = TestStatus::ALL.into_iter().find(|s| {
        let word = s.unittest_word();
        tail == word || (*s == TestStatus::Skipped && tail.starts_with("skipped "))
    });
    let Some(status) = status else {
        return UnittestLine::Other;
    };
    let name = if is_unittest_id(head) {
        head
    } else if let Some(header) = header {
        header
    } else {
        return UnittestLine::Other;
    };
    UnittestLine::Result(name.to_owned(), status)
}

/// `test_name (dotted.path)`.
fn is_unittest_id(text: &str) -> bool {
    let Some((name, rest)) = text.split_once(" (") else {
        return false;
    };
    let Some(path) = rest.strip_suffix(')') else {
        return false;
    };
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    word(name) && path.split('.').all(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_real_unittest_output() {
        // `python3.11 -m unittest -v` on a file with one test of each kind.
        let log = "test_add (test_c.CalcTest.test_add) ... FAIL\n\
                   test_doc (test_c.CalcTest.test_doc)\n\
                   A docstring line. ... ok\n\
                   test_err (test_c.CalcTest.test_err) ... ERROR\n\
                   test_skip (test_c.CalcTest.test_skip) ... skipped 'why'\n\
                   test_xf (test_c.CalcTest.test_xf) ... expected failure\n\
                   \n\
                   ======================================================================\n\
                   ERROR: test_err (test_c.CalcTest.test_err)\n\
                   ----------------------------------------------------------------------\n\
                   FAIL: test_add (test_c.CalcTest.test_add)\n\
                   Ran 5 tests in 0.001s\n\
                   FAILED (failures=1, errors=1, skipped=1, expected failures=1)\n";
        let results = parse_test_log(log, LogFormat::Auto);
        let expect = [
            ("test_add (test_c.CalcTest.test_add)", TestStatus::Failed),
            ("test_doc (test_c.CalcTest.test_doc)", TestStatus::Passed),
            ("test_err (test_c.CalcTest.test_err)", TestStatus::Error),
            ("test_skip (test_c.CalcTest.test_skip)", TestStatus::Skipped),
            ("test_xf (test_c.CalcTest.test_xf)", TestStatus::XFail),
        ];
        assert_eq!(results.len(), expect.len(), "{results:?}");
        for (name, status) in expect {
            assert_eq!(results.get(name), Some(&status), "{name}");
        }
    }

    #[test]
    fn reads_pytest_summary_progress_and_xdist_lines() {
        let log = "tests/test_x.py::test_a PASSED                                  [ 25%]\n\
                   tests/test_x.py::test_b[1 - 2] FAILED                           [ 50%]\n\
                   [gw1] [ 75%] PASSED tests/test_x.py::test_c \n\
                   =========================== short test summary info ============================\n\
                   PASSED tests/test_x.py::test_a\n\
                   FAILED tests/test_x.py::test_b[1 - 2] - AssertionError: assert 1 == 2\n\
                   ERROR tests/test_y.py::test_d - fixture 'db' not found\n\
                   SKIPPED [1] tests/test_y.py:12: no network\n\
                   XFAIL tests/test_y.py::test_e - known bug\n\
                   ========================= 1 failed, 2 passed in 0.12s =========================\n";
        let results = parse_test_log(log, LogFormat::Pytest);
        assert_eq!(results.len(), 5, "{results:?}");
        assert_eq!(results["tests/test_x.py::test_a"], TestStatus::Passed);
        assert_eq!(
            results["tests/test_x.py::test_b[1 - 2]"],
            TestStatus::Failed
        );
        assert_eq!(results["tests/test_x.py::test_c"], TestStatus::Passed);
        assert_eq!(results["tests/test_y.py::test_d"], TestStatus::Error);
        assert_eq!(results["tests/test_y.py::test_e"], TestStatus::XFail);
    }

    #[test]
    fn the_formats_do_not_read_each_other() {
        let unittest = "test_a (m.C) ... ok\n";
        assert!(parse_test_log(unittest, LogFormat::Pytest).is_empty());
        let pytest = "PASSED t.py::test_a\n";
        assert!(parse_test_log(pytest, LogFormat::Unittest).is_empty());
    }

    fn status() -> impl Strategy<Value = TestStatus> {
        prop::sample::select(TestStatus::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn pytest_summaries_round_trip(
            tests in prop::collection::btree_map(
                "tests/test_[a-z]{1,6}\\.py::test_[a-z0-9_]{1,8}(\\[[a-z0-9 -]{1,6}\\])?",
                status(),
                0..12,
            ),
            verbose in any::<bool>(),
        ) {
            let mut log = String::from("============ test session starts ============\n");
            for (name, status) in &tests {
                if verbose {
                    log.push_str(&format!("{name} {} [ 10%]\n", status.pytest_word()));
                } else {
                    log.push_str(&format!("{} {name} - some message\n", status.pytest_word()));
                }
            }
            log.push_str("============ 3 passed in 0.1s ============\n");
            prop_assert_eq!(parse_test_log(&log, LogFormat::Auto), tests);
        }

        #[test]
        fn unittest_results_round_trip(
            tests in prop::collection::btree_map(
                "test_[a-z_]{1,8} \\([a-z_]{1,6}\\.[A-Z][a-zA-Z]{1,6}(\\.test_[a-z]{1,4})?\\)",
                (status(), prop::option::of("[A-Z][a-z ]{0,12}")),
                0..12,
            ),
        ) {
            let mut log = String::new();
            for (name, (status, doc)) in &tests {
                let word = match status {
                    TestStatus::Skipped => "skipped 'reason'".to_owned(),
                    other => other.unittest_word().to_owned(),
                };
                match doc {
                    Some(doc) => log.push_str(&format!("{name}\n{doc}. ... {word}\n")),
                    None => log.push_str(&format!("{name} ... {word}\n")),
                }
            }
            log.push_str("\nRan 3 tests in 0.001s\n\nOK\n");
            let expected: BTreeMap<String, TestStatus> =
                tests.into_iter().map(|(n, (s, _))| (n, s)).collect();
            prop_assert_eq!(parse_test_log(&log, LogFormat::Auto), expected);
        }

        #[test]
        fn never_panics(log in "\\PC{0,200}") {
            let _ = parse_test_log(&log, LogFormat::Auto);
        }
    }
}
