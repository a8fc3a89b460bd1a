//! `POST /v1/rollouts` bodies: read field by field, so that a bad request is refused with the
//! field it got wrong.

use std::time::Duration;

use serde_json::{Map, Value};
use uniagent_core::Task;

/// A request the service refuses, and the field it names (`task.messages[0].role`, ...).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct BadRequest {
    /// The field, as a dotted path from the body's root.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl BadRequest {
    /// A refusal of `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The longest `request_id` accepted (verl's are 32 hex digits).
const MAX_REQUEST_ID: usize = 256;

/// One rollout to run, as verl's agent loop sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutRequest {
    /// The task.
    pub task: Task,
    /// verl's per-trajectory request id (every generation of the rollout carries it).
    pub request_id: String,
    /// verl's sampling parameters, passed to the bridge unchanged.
    pub sampling_params: Map<String, Value>,
    /// The generation bridge's URL.
    pub bridge_url: String,
    /// The sample's index in its group.
    pub sample: u32,
    /// GRPO's group size, for logs.
    pub group_size: Option<u32>,
    /// The rollout's wall-clock deadline, when the caller sets one.
    pub timeout: Option<Duration>,
}

impl RolloutRequest {
    /// Reads a request body.
    ///
    /// ```
    /// use serde_json::json;
    /// use uniagent_cli::serve::RolloutRequest;
    /// let ok = RolloutRequest::parse(json!({
    ///     "task": {"id": "t1", "messages": [{"role": "user", "content": "hi"}]},
    ///     "request_id": "abc", "sampling_params": {"temperature": 1.0},
    ///     "bridge_url": "http://127.0.0.1:9000/generate", "sample": 2,
    /// })).unwrap();
    /// assert_eq!((ok.task.id.as_str(), ok.sample), ("t1", 2));
    ///
    /// let bad = RolloutRequest::parse(json!({
    ///     "task": {"id": "t1", "messages": [{"role": 7}]},
    ///     "request_id": "abc", "sampling_params": {}, "bridge_url": "http://x/g",
    /// })).unwrap_err();
    /// assert_eq!(bad.field, "task.messages[0].role");
    /// ```
    pub fn parse(body: Value) -> Result<Self, BadRequest> {
        let Value::Object(mut body) = body else {
            return Err(BadRequest::new("", "the body must be a JSON object"));
        };
        let task_value = body
            .remove("task")
            .ok_or_else(|| BadRequest::new("task", "missing"))?;
        let task: Task = serde_path_to_error::deserialize(task_value).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." {
                "task".to_owned()
            } else {
                format!("task.{path}")
            };
            BadRequest::new(field, e.into_inner().to_string())
        })?;
        if task.id.is_empty() {
            return Err(BadRequest::new("task.id", "must not be empty"));
        }
        let request_id = string(&body, "request_id")?;
        if request_id.is_empty() || request_id.len() > MAX_REQUEST_ID {
            return Err(BadRequest::new(
                "request_id",
                format!("must have 1 to {MAX_REQUEST_ID} bytes"),
            ));
        }
        let sampling_params = match body.remove("sampling_params") {
            Some(Value::Object(m)) => m,
            Some(_) => return Err(BadRequest::new("sampling_params", "must be an object")),
            None => return Err(BadRequest::new("sampling_params", "missing")),
        };
        let bridge_url = string(&body, "bridge_url")?;
        check_url(&bridge_url)?;
        let sample = optional_u32(&body, "sample")?.unwrap_or(0);
        let group_size = optional_u32(&body, "group_size")?;
        if group_size == Some(0) {
            return Err(BadRequest::new("group_size", "must be at least 1"));
        }
        let timeout = match body.get("timeout_s") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let secs = v.as_f64().filter(|s| s.is_finite() && *s > 0.0);
                let secs = secs.ok_or_else(|| {
                    BadRequest::new("timeout_s", "must be a positive number of seconds")
                })?;
                Some(Duration::try_from_secs_f64(secs).map_err(|_| {
                    BadRequest::new("timeout_s", "must be a positive number of seconds")
                })?)
            }
        };
        Ok(Self {
            task,
            request_id,
            sampling_params,
            bridge_url,
            sample,
            group_size,
            timeout,
        })
    }
}

fn string(body: &Map<String, Value>, field: &str) -> Result<String, BadRequest> {
    match body.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(BadRequest::new(field, "must be a string")),
        None => Err(BadRequest::new(field, "missing")),
    }
}

fn optional_u32(body: &Map<String, Value>, field: &str) -> Result<Option<u32>, BadRequest> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| BadRequest::new(field, "must be a non-negative integer below 2^32")),
    }
}

/// An `http://` or `https://` URL with a host.
fn check_url(url: &str) -> Result<(), BadRequest> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(()),
        _ => Err(BadRequest::new(
            "bridge_url",
            "must be an http:// or https:// URL with a host",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({
            "task": {"id": "t", "messages": [{"role": "user", "content": "x"}]},
            "request_id": "r", "sampling_params": {}, "bridge_url": "http://h:1/g",
        })
    }

    fn refused(edit: impl FnOnce(&mut Map<String, Value>)) -> String {
        let mut body = good();
        if let Some(map) = body.as_object_mut() {
            edit(map);
        }
        match RolloutRequest::parse(body) {
            Ok(_) => "accepted".into(),
            Err(e) => e.field,
        }
    }

    #[test]
    fn every_field_is_named_when_it_is_wrong() {
        assert_eq!(refused(|_| {}), "accepted");
        assert_eq!(refused(|m| drop(m.remove("task"))), "task");
        assert_eq!(refused(|m| drop(m.insert("task".into(), json!(3)))), "task");
        assert_eq!(
            refused(|m| drop(m.insert("task".into(), json!({"id": "", "messages": []})))),
            "task.id"
        );
        assert_eq!(refused(|m| drop(m.remove("request_id"))), "request_id");
        assert_eq!(
            refused(|m| drop(m.insert("request_id".into(), json!("x".repeat(300))))),
            "request_id"
        );
        assert_eq!(
            refused(|m| drop(m.insert("sampling_params".into(), json!([])))),
            "sampling_params"
        );
        assert_eq!(
            refused(|m| drop(m.insert("bridge_url".into(), json!("ftp://x")))),
            "bridge_url"
        );
        assert_eq!(
            refused(|m| drop(m.insert("sample".into(), json!(-1)))),
            "sample"
        );
        assert_eq!(
            refused(|m| drop(m.insert("group_size".into(), json!(0)))),
            "group_size"
        );
        assert_eq!(
            refused(|m| drop(m.insert("timeout_s".into(), json!(0)))),
            "timeout_s"
        );
        assert_eq!(
            RolloutRequest::parse(json!([])).map_err(|e| e.field),
            Err(String::new())
        );
    }
}
