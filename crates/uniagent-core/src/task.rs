//! A task: what one rollout is asked to do.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::Message;

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

    /// Adds one metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }
}
