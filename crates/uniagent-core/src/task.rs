//! A task: what one rollout is asked to do.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::Message;

/// The metadata field holding a task's own wall-clock limit in seconds (a positive number): the
/// rollout ends at the smaller of it and `loop.wall_clock_budget`, with the loop's
/// `wall_clock_timeout` ending. Harbor tasks set it from `[agent] timeout_sec`.
pub const TIME_LIMIT_FIELD: &str = "time_limit_sec";

/// One task instance: the initial conversation plus whatever the environment and the reward need
/// (repository, base commit, ground truth...), kept as free-form metadata.
///
/// ```
/// use uniagent_core::{Message, Task};
/// let task = Task::new("t-1", vec![Message::user("What is in /data/answer.txt?")])
///     .with_metadata("answer", serde_json::json!("42"));
/// assert_eq!(task.metadata["answer"], "42");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Unique id (used in file names, container labels and logs).
    pub id: String,
    /// The prompt: system and user messages the rollout starts from.
    pub messages: Vec<Message>,
    /// Environment- and reward-specific data.
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

impl Task {
    /// A task with no metadata.
    pub fn new(id: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            id: id.into(),
            messages,
            metadata: Map::new(),
        }
    }

    /// The task's own wall-clock limit ([`TIME_LIMIT_FIELD`]): `None` when unset (or `null`),
    /// an error when it is not a positive, finite number of seconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use uniagent_core::{Task, TIME_LIMIT_FIELD};
    /// let task = Task::new("t", vec![]).with_metadata(TIME_LIMIT_FIELD, serde_json::json!(1.5));
    /// assert_eq!(task.time_limit(), Ok(Some(Duration::from_millis(1500))));
    /// assert_eq!(Task::new("t", vec![]).time_limit(), Ok(None));
    /// let bad = Task::new("t", vec![]).with_metadata(TIME_LIMIT_FIELD, serde_json::json!(-1));
    /// assert!(bad.time_limit().unwrap_err().contains(TIME_LIMIT_FIELD));
    /// ```
    pub fn time_limit(&self) -> Result<Option<Duration>, String> {
        match self.metadata.get(TIME_LIMIT_FIELD) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|s| *s > 0.0)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .map(Some)
                .ok_or_else(|| {
                    format!("`{TIME_LIMIT_FIELD}` = {v}: must be a positive number of seconds")
                }),
        }
    }

    /// Adds one metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }
}
