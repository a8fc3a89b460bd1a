//! `parse_log_django`: Django's test runner (unittest `-v 2` lines, `FAIL:`/`ERROR:` headers,
//! and three known cases where output interrupts a result line).

use std::sync::LazyLock;

use regex::Regex;

use super::{compiled_ref, crashed, ParseResult};
use crate::swebench::pytext::{split, strip, PY_SPACE_CLASS};
use crate::swebench::status::{Status, StatusMap};

const VERSION_TEST: &str = "--version is equivalent to version";
const PASS_SUFFIXES: [&str; 3] = [" ... ok", " ... OK", " ...  OK"];
/// django__django-7188 prints a migration line before its result on the same line.
const MIGRATION_PREFIX: &str = "Applying sites.0002_alter_domain_unique...test_no_migrations";

/// Result lines that a long multi-line print split from their `ok`.
static INTERRUPTED: LazyLock<Vec<Option<Regex>>> = LazyLock::new(|| {
    let s = PY_SPACE_CLASS;
    [
        format!(r"(?m)^(.*?){s}\.\.\.{s}Testing against Django installed in ((?s:.*?)) silenced\)\.\nok$"),
        format!(r"(?m)^(.*?){s}\.\.\.{s}Internal Server Error: /(.*)/\nok$"),
        format!(r"(?m)^(.*?){s}\.\.\.{s}System check identified no issues \(0 silenced\)\nok$"),
    ]
    .iter()
    .map(|p| Regex::new(p).ok())
    .collect()
});

/// The second word of a `FAIL: name (...)` header; the package raises when there is none.
fn header_test<'a>(line: &'a str, parser: &str) -> Result<&'a str, crate::RewardError> {
    split(line)
        .get(1)
        .copied()
        .ok_or_else(|| crashed(parser, format!("IndexError: no test name after `{line}`")))
}

pub(super) fn parse(log: &str) -> ParseResult {
    let parser = "parse_log_django";
    let mut map = StatusMap::new();
    let mut prev_test: Option<String> = None;
    for raw in log.split('\n') {
        let mut line = strip(raw).to_owned();
        if line.contains(VERSION_TEST) {
            map.insert(VERSION_TEST, Status::Passed);
        }
        if let Some((head, _)) = line.split_once(" ... ") {
            prev_test = Some(head.to_owned());
        }
        for suffix in PASS_SUFFIXES {
            if line.ends_with(suffix) {
                if strip(&line).starts_with(MIGRATION_PREFIX) {
                    let after = line.split_once("...").map_or(line.as_str(), |(_, a)| a);
                    line = strip(after).to_owned();
                }
                let test = line.rsplit_once(suffix).map_or(line.as_str(), |(t, _)| t);
                map.insert(test, Status::Passed);
                break;
            }
        }
        if let Some((test, _)) = line.split_once(" ... skipped") {
            map.insert(test, Status::Skipped);
        }
        if line.ends_with(" ... FAIL") {
            let test = line.split(" ... FAIL").next().unwrap_or_default();
            map.insert(test, Status::Failed);
        }
        if line.starts_with("FAIL:") {
            map.insert(header_test(&line, parser)?, Status::Failed);
        }
        if line.ends_with(" ... ERROR") {
            let test = line.split(" ... ERROR").next().unwrap_or_default();
            map.insert(test, Status::Error);
        }
        if line.starts_with("ERROR:") {
            map.insert(header_test(&line, parser)?, Status::Error);
        }
        if let Some(prev) = &prev_test {
            if line
                .trim_start_matches(crate::swebench::pytext::is_py_space)
                .starts_with("ok")
            {
                map.insert(prev.clone(), Status::Passed);
            }
        }
    }
    for pattern in INTERRUPTED.iter() {
        let pattern = compiled_ref(pattern)?;
        for caps in pattern.captures_iter(log) {
            let test = caps.get(1).map_or("", |m| m.as_str());
            map.insert(test, Status::Passed);
        }
    }
    Ok(map)
}
