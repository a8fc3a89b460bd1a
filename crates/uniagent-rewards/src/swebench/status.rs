//! The package's per-test status strings and its status map (a Python dict: insertion order,
//! the last write wins).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One test's status, exactly as a `swebench` parser yields it.
///
/// The five words of the package's `TestStatus` enum get their own variants; the parsers copy
/// the first (or last) word of a line, so they can yield other strings too (`PASSED[100%]`,
/// `XPASS`), which are kept verbatim in [`Status::Other`]. Serialised as the plain string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// `PASSED`
    Passed,
    /// `FAILED`
    Failed,
    /// `SKIPPED`
    Skipped,
    /// `ERROR`
    Error,
    /// `XFAIL` (an expected failure; grades as a pass)
    XFail,
    /// Any other word a parser copied from the log.
    Other(String),
}

impl Status {
    /// The five words of the package's `TestStatus`, in its declaration order (the order its
    /// parsers try them in).
    pub(crate) const WORDS: [&'static str; 5] = ["FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"];

    /// The status named by `word`.
    pub fn from_word(word: &str) -> Self {
        match word {
            "PASSED" => Self::Passed,
            "FAILED" => Self::Failed,
            "SKIPPED" => Self::Skipped,
            "ERROR" => Self::Error,
            "XFAIL" => Self::XFail,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The status string.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Passed => "PASSED",
            Self::Failed => "FAILED",
            Self::Skipped => "SKIPPED",
            Self::Error => "ERROR",
            Self::XFail => "XFAIL",
            Self::Other(word) => word,
        }
    }

    /// `PASSED` or `XFAIL`: what the harness grades as passing.
    pub fn is_pass(&self) -> bool {
        matches!(self, Self::Passed | Self::XFail)
    }

    /// `FAILED`, `ERROR` or `SKIPPED`: what the harness grades as failing a `FAIL_TO_PASS`
    /// test (any other string is neither passing nor failing, as in the package).
    pub fn is_fail(&self) -> bool {
        matches!(self, Self::Failed | Self::Error | Self::Skipped)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        Ok(Self::from_word(&word))
    }
}

/// Test id → status in the order the ids first appeared, a later write replacing the status
/// but keeping the position (Python `dict` semantics, which prefix matching of truncated ids
/// depends on).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusMap {
    entries: Vec<(String, Status)>,
    index: HashMap<String, usize>,
    /// Ids some line reported `FAILED` or `ERROR`, whatever their last status.
    ever_failed: HashSet<String>,
}

impl StatusMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `id`'s status (a repeated id keeps its first position).
    pub fn insert(&mut self, id: impl Into<String>, status: Status) {
        let id = id.into();
        if matches!(status, Status::Failed | Status::Error) {
            self.ever_failed.insert(id.clone());
        }
        match self.index.get(&id) {
            Some(&at) => self.entries[at].1 = status,
            None => {
                self.index.insert(id.clone(), self.entries.len());
                self.entries.push((id, status));
            }
        }
    }

    /// The status of `id`.
    pub fn get(&self, id: &str) -> Option<&Status> {
        self.index.get(id).map(|&at| &self.entries[at].1)
    }

    /// Number of tests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no test was found.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tests in first-seen order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Status)> {
        self.entries
            .iter()
            .map(|(id, status)| (id.as_str(), status))
    }

    /// The ids whose last status passes although an earlier line reported them `FAILED` or
    /// `ERROR` (in first-seen order). The package keeps the last status; a line printed after
    /// the runner's own report is how code under test spoofs a result.
    pub fn failed_then_passed(&self) -> Vec<&str> {
        self.iter()
            .filter(|(id, s)| s.is_pass() && self.ever_failed.contains(*id))
            .map(|(id, _)| id)
            .collect()
    }

    /// A copy where every id in [`StatusMap::failed_then_passed`] is `FAILED` again.
    pub fn with_conflicts_failed(&self) -> StatusMap {
        let mut map = self.clone();
        for (id, status) in &mut map.entries {
            if status.is_pass() && self.ever_failed.contains(id.as_str()) {
                *status = Status::Failed;
            }
        }
        map
    }

    /// The same tests, sorted by id.
    pub fn to_btree(&self) -> BTreeMap<String, Status> {
        self.entries.iter().cloned().collect()
    }
}

impl Serialize for StatusMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_keeps_its_place_and_takes_the_last_status() {
        let mut map = StatusMap::new();
        map.insert("b", Status::Passed);
        map.insert("a", Status::Failed);
        map.insert("b", Status::from_word("XPASS"));
        let order: Vec<_> = map.iter().map(|(id, s)| (id, s.as_str())).collect();
        assert_eq!(order, [("b", "XPASS"), ("a", "FAILED")]);
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            r#"{"b":"XPASS","a":"FAILED"}"#
        );
        assert!(!map.get("b").unwrap().is_pass() && !map.get("b").unwrap().is_fail());
    }
}
