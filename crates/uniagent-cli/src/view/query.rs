//! [`ListQuery`]: the filters, search and page of the trajectory list, parsed from a URL
//! query string with a typed error for every bad value.

use std::collections::HashMap;

use serde_json::Value;

use super::error::ViewError;
use super::row::TrajRow;

/// The largest page the list serves.
pub(super) const MAX_LIMIT: usize = 500;
/// The page size when none is asked for.
pub(super) const DEFAULT_LIMIT: usize = 50;

/// Filters, full-text search and paging of `GET /api/runs/{run}/trajectories`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ListQuery {
    /// Task id, exact.
    pub task: Option<String>,
    /// Exit reason, exact.
    pub exit_reason: Option<String>,
    /// Solved (`true`) or not (`false`); unrewarded rollouts match neither.
    pub success: Option<bool>,
    /// Smallest reward score.
    pub reward_min: Option<f64>,
    /// Largest reward score.
    pub reward_max: Option<f64>,
    /// Training step, exact.
    pub step: Option<u64>,
    /// Phase of a `train` run (`rl`, `eval`, ...), exact.
    pub phase: Option<String>,
    /// A weight version some sampled token of the trajectory has.
    pub version: Option<u64>,
    /// Case-insensitive text the messages must contain (ASCII case folding).
    pub q: Option<String>,
    /// Rows to skip.
    pub offset: usize,
    /// Rows to return (1..=[`MAX_LIMIT`]).
    pub limit: usize,
}

impl ListQuery {
    /// Parses `key=value&...` (percent-decoded by the caller); unknown keys are an error.
    pub(super) fn parse(params: &HashMap<String, String>) -> Result<Self, ViewError> {
        let mut q = ListQuery {
            limit: DEFAULT_LIMIT,
            ..Self::default()
        };
        for (key, value) in params {
            if value.is_empty() {
                continue;
            }
            match key.as_str() {
                "task" => q.task = Some(value.clone()),
                "exit_reason" => q.exit_reason = Some(value.clone()),
                "success" => q.success = Some(parse(key, value)?),
                "reward_min" => q.reward_min = Some(parse(key, value)?),
                "reward_max" => q.reward_max = Some(parse(key, value)?),
                "step" => q.step = Some(parse(key, value)?),
                "phase" => q.phase = Some(value.clone()),
                "version" => q.version = Some(parse(key, value)?),
                "q" => q.q = Some(value.clone()),
                "offset" => q.offset = parse(key, value)?,
                "limit" => {
                    q.limit = parse(key, value)?;
                    if q.limit == 0 || q.limit > MAX_LIMIT {
                        return Err(ViewError::bad_query(
                            key,
                            format!("must be 1..={MAX_LIMIT}"),
                        ));
                    }
                }
                _ => return Err(ViewError::bad_query(key, "unknown parameter")),
            }
        }
        Ok(q)
    }

    /// Whether the index row passes every filter (the search is checked separately).
    pub(super) fn matches(&self, r: &TrajRow) -> bool {
        self.task.as_ref().is_none_or(|t| *t == r.task_id)
            && self
                .exit_reason
                .as_ref()
                .is_none_or(|e| *e == r.exit_reason)
            && self.success.is_none_or(|s| r.success == Some(s))
            && self
                .reward_min
                .is_none_or(|m| r.score.is_some_and(|s| s >= m))
            && self
                .reward_max
                .is_none_or(|m| r.score.is_some_and(|s| s <= m))
            && self.step.is_none_or(|s| r.step == Some(s))
            && self
                .phase
                .as_ref()
                .is_none_or(|p| r.phase.as_ref() == Some(p))
            && self.version.is_none_or(|v| {
                r.version_min.is_some_and(|lo| lo <= v) && r.version_max.is_some_and(|hi| v <= hi)
            })
    }
}

fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ViewError>
where
    T::Err: std::fmt::Display,
{
    value
        .parse()
        .map_err(|e| ViewError::bad_query(key, format!("{value:?}: {e}")))
}

/// Full-text search over the messages of one trajectory line.
#[derive(Debug, Clone)]
pub(super) struct Search {
    needle: Vec<u8>,
    /// Whether the needle appears in the JSON text unchanged (no character JSON escapes), so
    /// a raw byte scan can rule lines out before parsing.
    prefilter: bool,
}

impl Search {
    /// A search for `text` (ASCII case-insensitive).
    pub(super) fn new(text: &str) -> Self {
        let needle = text.to_ascii_lowercase().into_bytes();
        let prefilter = !needle.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20);
        Self { needle, prefilter }
    }

    /// Whether the messages of `line` (a trajectory's JSON) contain the text.
    pub(super) fn matches(&self, line: &[u8]) -> bool {
        if self.needle.is_empty() {
            return true;
        }
        if self.prefilter && !contains_folded(line, &self.needle) {
            return false;
        }
        #[derive(serde::Deserialize)]
        struct Messages {
            #[serde(default)]
            messages: Vec<Value>,
        }
        let Ok(m) = serde_json::from_slice::<Messages>(line) else {
            return false;
        };
        m.messages.iter().any(|msg| self.in_value(msg))
    }

    /// Searches every string in a message (content, content parts, tool-call names and
    /// arguments), not the keys.
    fn in_value(&self, v: &Value) -> bool {
        match v {
            Value::String(s) => contains_folded(s.as_bytes(), &self.needle),
            Value::Array(a) => a.iter().any(|x| self.in_value(x)),
            Value::Object(o) => o.values().any(|x| self.in_value(x)),
            _ => false,
        }
    }
}

/// `needle` (already lowercase) in `hay`, ASCII case-insensitively.
fn contains_folded(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let upper = first.to_ascii_uppercase();
    let mut start = 0;
    while let Some(pos) = memchr::memchr2(first, upper, &hay[start..]) {
        let at = start + pos + 1;
        if hay.len() - at >= rest.len() && hay[at..at + rest.len()].eq_ignore_ascii_case(rest) {
            return true;
        }
        start = at;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_is_case_insensitive_and_only_in_messages() {
        let line = br#"{"id":"needle","messages":[{"role":"tool","content":"Found the NeedLe \"x\""},
            {"role":"assistant","tool_calls":[{"function":{"name":"bash","arguments":"{\"cmd\":\"ls\"}"}}]}]}"#;
        assert!(Search::new("needle").matches(line));
        assert!(Search::new("the needle \"x\"").matches(line));
        assert!(Search::new("\"cmd\"").matches(line));
        assert!(!Search::new("haystack").matches(line));
        assert!(!Search::new("role").matches(line), "keys are not searched");
        assert!(!Search::new("needle").matches(br#"{"id":"needle","messages":[]}"#));
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let p = |k: &str, v: &str| ListQuery::parse(&HashMap::from([(k.into(), v.into())]));
        assert!(p("limit", "0").is_err());
        assert!(p("limit", "x").unwrap_err().to_string().contains("limit"));
        assert!(p("colour", "red").is_err());
        assert_eq!(p("success", "true").unwrap().success, Some(true));
        assert_eq!(p("q", "").unwrap(), p("offset", "0").unwrap());
    }
}
