//! The SWE-bench harness's per-repository spec table, for rows without a `test_cmd`: the test
//! command of each Python (repo, version), the commands run before it, and the rule that
//! appends test directives taken from the test patch.
//!
//! The table (`data/swebench_specs.json`) is generated from swebench 4.1.0, the last release
//! that ships it (5.x datasets carry their own eval scripts), by
//! `scripts/swebench-specs/generate.py`; the golden test checks [`test_command`] against the
//! package's `make_eval_script_list_py` on sample test patches.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::Deserialize;

/// One (repo, version) of the table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RepoSpec {
    /// `test_cmd`: the test runner and its options.
    pub test_cmd: String,
    /// `eval_commands`: run before the tests (environment variables, locale).
    pub eval_commands: Vec<String>,
    /// `install`: re-run before the tests (the patch may change compiled code).
    pub install: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Table {
    package: String,
    non_test_exts: Vec<String>,
    specs: BTreeMap<String, BTreeMap<String, RepoSpec>>,
}

static TABLE: LazyLock<Table> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // the file is part of the crate and checked by its tests
    serde_json::from_str(include_str!("../../data/swebench_specs.json"))
        .expect("data/swebench_specs.json is valid")
});

static DIFF_TARGET: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a constant pattern
    Regex::new(r"diff --git a/.* b/(.*)").expect("valid pattern")
});

/// The package the table was generated from (`swebench 4.1.0`).
pub fn source_package() -> &'static str {
    &TABLE.package
}

/// The spec of `repo` at `version`, if the table has one.
pub fn spec(repo: &str, version: &str) -> Option<&'static RepoSpec> {
    TABLE.specs.get(repo)?.get(version)
}

/// The harness's `get_test_directives`: every `b/` path of a `diff --git` header in
/// `test_patch` (found anywhere, as `re.findall` does), except files with a non-test extension
/// (`.json`, `.txt`, `.md`, ...); for `django/django` as module names (`.py` and a leading
/// `tests/` dropped, `/` → `.`); `test.py` for `swe-bench/humaneval`.
pub fn test_directives(repo: &str, test_patch: &str) -> Vec<String> {
    if repo == "swe-bench/humaneval" {
        return vec!["test.py".into()];
    }
    let directives = DIFF_TARGET
        .captures_iter(test_patch)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str())
        .filter(|d| {
            !TABLE
                .non_test_exts
                .iter()
                .any(|ext| d.ends_with(ext.as_str()))
        });
    if repo == "django/django" {
        return directives
            .map(|d| {
                let d = d.strip_suffix(".py").unwrap_or(d);
                let d = d.strip_prefix("tests/").unwrap_or(d);
                d.replace('/', ".")
            })
            .collect();
    }
    directives.map(str::to_owned).collect()
}

/// The test command the harness runs for an instance: the spec's `test_cmd` followed by the
/// [`test_directives`] of its test patch, space-separated.
pub fn test_command(repo: &str, version: &str, test_patch: &str) -> Option<String> {
    let spec = spec(repo, version)?;
    let mut parts = vec![spec.test_cmd.clone()];
    parts.extend(test_directives(repo, test_patch));
    Some(parts.join(" "))
}

/// What the harness's eval script runs around the tests, as one shell script: the conda
/// environment `testbed` activated when the image has one (SWE-bench images do), the spec's
/// `eval_commands`, its `install`, then [`test_command`].
pub fn test_script(repo: &str, version: &str, test_patch: &str) -> Option<String> {
    let spec = spec(repo, version)?;
    let mut lines = vec![
        "if [ -f /opt/miniconda3/bin/activate ]; then source /opt/miniconda3/bin/activate && conda activate testbed; fi".to_owned(),
    ];
    lines.extend(spec.eval_commands.iter().cloned());
    lines.extend(spec.install.iter().cloned());
    lines.push(test_command(repo, version, test_patch)?);
    Some(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_and_rules_apply() {
        assert_eq!(source_package(), "swebench 4.1.0");
        assert!(spec("django/django", "3.0").is_some());
        assert!(spec("django/django", "0.0").is_none());
        let patch = "diff --git a/tests/a/test_b.py b/tests/a/test_b.py\ndiff --git a/tests/a/data.json b/tests/a/data.json\n";
        assert_eq!(test_directives("django/django", patch), ["a.test_b"]);
        assert_eq!(test_directives("o/r", patch), ["tests/a/test_b.py"]);
        assert_eq!(test_directives("swe-bench/humaneval", patch), ["test.py"]);
        let script = test_script("django/django", "3.0", patch).unwrap();
        assert!(script.ends_with("--parallel 1 a.test_b"), "{script}");
        assert!(script.starts_with("if [ -f /opt/miniconda3/bin/activate ]"));
    }
}
