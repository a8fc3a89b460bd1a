//! Small helpers: locks that survive poisoning, times, random names, JSON merge patches and
//! `metav1.Condition` lists.

use std::sync::{Mutex, MutexGuard};

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Map, Value};

/// Locks `mutex`, taking the data even if a panicking thread poisoned it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Now, as Kubernetes writes times: RFC 3339 in UTC with whole seconds.
pub(crate) fn now_rfc3339() -> String {
    format_time(Timestamp::now())
}

/// `time` with whole seconds, `Z` suffix.
pub(crate) fn format_time(time: Timestamp) -> String {
    Timestamp::from_second(time.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| time.to_string())
}

/// Parses an RFC 3339 time.
pub(crate) fn parse_time(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

/// `n` random characters from `[a-z0-9]`, as `generateName` suffixes are.
pub(crate) fn random_suffix(n: usize) -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..n)
        .map(|_| char::from(CHARS[fastrand::usize(..CHARS.len())]))
        .collect()
}

/// A random UUID (version 4 layout).
pub(crate) fn random_uid() -> String {
    let a = fastrand::u128(..);
    let hex = format!("{a:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// Applies a JSON merge patch (RFC 7386) to `target`.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(entries) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Some(map) = target.as_object_mut() {
                for (key, value) in entries {
                    if value.is_null() {
                        map.remove(key);
                    } else {
                        merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// A `metav1.Condition`.
pub(crate) fn condition(
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: u64,
) -> Value {
    json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now_rfc3339(),
    })
}

/// `new` with each condition's `lastTransitionTime` taken from `old` when that condition's
/// status did not change, so an unchanged state writes an identical object.
pub(crate) fn keep_transition_times(old: &Value, new: Vec<Value>) -> Vec<Value> {
    let old = old.as_array().cloned().unwrap_or_default();
    new.into_iter()
        .map(|mut c| {
            if let Some(prev) = old.iter().find(|o| o["type"] == c["type"]) {
                if prev["status"] == c["status"] && prev["lastTransitionTime"].is_string() {
                    c["lastTransitionTime"] = prev["lastTransitionTime"].clone();
                }
            }
            c
        })
        .collect()
}

/// The condition of type `kind` in `conditions`, if present.
pub(crate) fn find_condition<'a>(conditions: &'a Value, kind: &str) -> Option<&'a Value> {
    conditions.as_array()?.iter().find(|c| c["type"] == kind)
}

/// Whether `conditions` holds `kind` with status `True`.
pub(crate) fn condition_true(conditions: &Value, kind: &str) -> bool {
    find_condition(conditions, kind).is_some_and(|c| c["status"] == "True")
}
