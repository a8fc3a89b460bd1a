//! Checking what a writer produced against the JSON Schema of its format.

use serde_json::Value;

use crate::formats::trajectories;

/// Why `record` is not a version-1 trajectory record
/// ([`trajectories::SCHEMA`]), one message per violation with its JSON pointer; empty when it
/// is one.
///
/// ```
/// use uniagent_core::agent::{ExitReason, Trajectory};
/// use uniagent_core::formats::trajectories::record;
/// use uniagent_core::testing::trajectory_record_violations;
/// let t = Trajectory::empty("t", 0, vec![], ExitReason::Finished, None);
/// let mut line = serde_json::Value::Object(record(&t));
/// assert!(trajectory_record_violations(&line).is_empty());
/// line["response_logprobs"] = serde_json::Value::Null; // null is never written
/// assert!(!trajectory_record_violations(&line).is_empty());
/// ```
pub fn trajectory_record_violations(record: &Value) -> Vec<String> {
    let schema: Value = match serde_json::from_str(trajectories::SCHEMA) {
        Ok(schema) => schema,
        Err(e) => return vec![format!("the schema is not JSON: {e}")],
    };
    let validator = match jsonschema::validator_for(&schema) {
        Ok(v) => v,
        Err(e) => return vec![format!("the schema does not compile: {e}")],
    };
    validator
        .iter_errors(record)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}
