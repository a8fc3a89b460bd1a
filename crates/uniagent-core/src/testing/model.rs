//! [`ScriptedChatModel`]: replays assistant turns.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::model::{AssistantTurn, ChatModel, FinishReason};
use crate::rollout::RolloutCache;
use crate::sampling::SamplingParams;

/// One scripted assistant turn.
#[derive(Debug, Clone)]
pub enum ScriptedTurn {
    /// Reply with this assistant message.
    Reply(Message),
    /// Reply with text that holds a malformed tool call; `error` is what the model is shown.
    FormatError {
        /// The raw assistant text.
        content: String,
        /// The format error message.
        error: String,
    },
    /// Fail like a backend would.
    Fail {
        /// Error text.
        message: String,
        /// Whether the failure is transient.
        retryable: bool,
    },
    /// Never answer (for wall-clock and cancellation tests).
    Hang,
}

/// What the model was asked in one `query`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// Trajectory id.
    pub trajectory: String,
    /// The conversation as the model saw it.
    pub messages: Vec<Message>,
    /// Sampling parameters.
    pub sampling: SamplingParams,
}

/// A message-level chat model that replays a script.
///
/// Turn `i` of every trajectory answers with `script[i]` (the trajectory's assistant-turn
/// count picks the entry), so one model serves many concurrent trajectories deterministically.
/// Past the end of the script it fails with a non-retryable model error.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use uniagent_core::testing::{ScriptedChatModel, ScriptedTurn};
/// use uniagent_core::{ChatModel, Message, SamplingParams};
///
/// let model = ScriptedChatModel::new(vec![ScriptedTurn::Reply(Message::assistant("hello"))]);
/// let mut cache = model.start("t1", vec![Message::user("hi")], vec![]).await?;
/// let turn = model.query(&mut cache, &SamplingParams::default()).await?;
/// assert_eq!(turn.message.text(), "hello");
/// assert_eq!(model.requests()[0].messages.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedChatModel {
    script: Arc<Vec<ScriptedTurn>>,
    record: bool,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
}

impl ScriptedChatModel {
    /// A model that replays `script` and records every request.
    pub fn new(script: Vec<ScriptedTurn>) -> Self {
        Self {
            script: Arc::new(script),
            record: true,
            requests: Arc::default(),
        }
    }

    /// Stops recording requests (for load tests with many trajectories).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.requests).clone()
    }
}

#[async_trait]
impl ChatModel for ScriptedChatModel {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn query(
        &self,
        cache: &mut RolloutCache,
        sampling: &SamplingParams,
    ) -> Result<AssistantTurn> {
        sampling.validate()?;
        if self.record {
            lock(&self.requests).push(ModelRequest {
                trajectory: cache.id().to_owned(),
                messages: cache.messages().to_vec(),
                sampling: sampling.clone(),
            });
        }
        let index = cache.assistant_turns() as usize;
        let step = self
            .script
            .get(index)
            .cloned()
            .ok_or_else(|| Error::Model {
                backend: "scripted".into(),
                message: format!(
                    "script has {} turns; turn {index} was requested",
                    self.script.len()
                ),
                retryable: false,
                source: None,
            })?;
        let (message, format_error) = match step {
            ScriptedTurn::Reply(m) => (m, None),
            ScriptedTurn::FormatError { content, error } => {
                (Message::assistant(content), Some(error))
            }
            ScriptedTurn::Fail { message, retryable } => {
                return Err(Error::Model {
                    backend: "scripted".into(),
                    message,
                    retryable,
                    source: None,
                })
            }
            ScriptedTurn::Hang => std::future::pending().await,
        };
        if message.role != crate::Role::Assistant {
            return Err(Error::invalid_input(format!(
                "scripted turn {index} is not an assistant message"
            )));
        }
        let finish_reason = if message.tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        cache.push_message(message.clone());
        Ok(AssistantTurn {
            message,
            finish_reason,
            format_error,
            sampled_tokens: 0,
        })
    }
}
