//! `parse_log_sympy`: SymPy's own runner (`bin/test`): `test_name ok|F|E` lines, and
//! `___ path.py:test ___` failure headers.

use std::sync::LazyLock;

use regex::Regex;

use super::{compiled, ParseResult};
use crate::swebench::pytext::{split, strip};
use crate::swebench::status::{Status, StatusMap};

static FAILURE_HEADER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(_*) (.*)\.py:(.*) (_*)").ok());

pub(super) fn parse(log: &str) -> ParseResult {
    let mut map = StatusMap::new();
    for caps in compiled(&FAILURE_HEADER)?.captures_iter(log) {
        let group = |i: usize| caps.get(i).map_or("", |m| m.as_str());
        map.insert(format!("{}.py:{}", group(2), group(3)), Status::Failed);
    }
    for raw in log.split('\n') {
        let line = strip(raw);
        if !line.starts_with("test_") {
            continue;
        }
        let first = || split(line).first().copied().unwrap_or_default();
        if line.ends_with(" E") {
            map.insert(first(), Status::Error);
        }
        if line.ends_with(" F") {
            map.insert(first(), Status::Failed);
        }
        if line.ends_with(" ok") {
            map.insert(first(), Status::Passed);
        }
    }
    Ok(map)
}
