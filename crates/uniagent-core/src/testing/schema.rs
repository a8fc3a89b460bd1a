//! Checking what a writer produced against the JSON Schema of its format.

use serde_json::Value;

use crate::formats::{cassettes, trajectories};

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
    violations(trajectories::SCHEMA, record)
}

/// Why `line` is not a version-1 cassette of either kind ([`cassettes::SCHEMA`]; a gateway
/// cassette's `trajectories` are checked against [`trajectories::SCHEMA`]), one message per
/// violation with its JSON pointer; empty when it is one.
///
/// ```
/// use uniagent_core::testing::cassette_violations;
/// let line = serde_json::json!({"cassette": 1, "kind": "gateway"});
/// let violations = cassette_violations(&line);
/// assert!(violations.iter().any(|v| v.contains("exchanges")), "{violations:?}");
/// ```
pub fn cassette_violations(line: &Value) -> Vec<String> {
    violations(cassettes::SCHEMA, line)
}

/// Validates `instance` against `schema`, with this crate's other schemas available to `$ref`
/// by their `$id` (nothing is fetched).
fn violations(schema: &str, instance: &Value) -> Vec<String> {
    let parse = |text: &str| serde_json::from_str::<Value>(text);
    let (schema, record) = match (parse(schema), parse(trajectories::SCHEMA)) {
        (Ok(schema), Ok(record)) => (schema, record),
        (Err(e), _) | (_, Err(e)) => return vec![format!("a schema is not JSON: {e}")],
    };
    let id = record
        .get("$id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let registry = match jsonschema::Registry::new()
        .add(id, record)
        .and_then(|r| r.prepare())
    {
        Ok(registry) => registry,
        Err(e) => return vec![format!("the schemas do not register: {e}")],
    };
    let validator = match jsonschema::options()
        .with_registry(&registry)
        .build(&schema)
    {
        Ok(v) => v,
        Err(e) => return vec![format!("the schema does not compile: {e}")],
    };
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}
