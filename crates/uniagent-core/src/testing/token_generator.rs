//! [`ScriptedTokenGenerator`]: a token generator that replays a script through a real codec.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use super::model::ScriptedTurn;
use crate::codec::{py_json_dumps, Codec};
use crate::error::{Error, Result};
use crate::generator::{GenerateOutput, GenerateRequest, TokenGenerator};
use crate::message::Message;
use crate::model::FinishReason;

/// The logprob of every token a [`ScriptedTokenGenerator`] samples.
pub const SCRIPTED_LOGPROB: f32 = -0.5;

/// A [`TokenGenerator`] that answers turn `i` of every rollout (counted per
/// `session_id`) with `script[i]`, encoded with the policy's codec and ended with the first
/// stop id — what a well-behaved policy samples. Drive it through the real
/// [`TokenChatModel`](crate::agent::TokenChatModel) to test token-level behaviour (length
/// budgets, masks, logprobs) end to end.
///
/// A [`ScriptedTurn::Reply`] is sampled as [`assistant_text`] renders it, a
/// [`ScriptedTurn::FormatError`] as its raw `content` (the codec's parser finds the error),
/// [`ScriptedTurn::Fail`] fails the call and [`ScriptedTurn::Hang`] never answers. A turn
/// longer than `max_new_tokens` is cut there (finish reason `length`). Every sampled token
/// has logprob [`SCRIPTED_LOGPROB`]; the weight version is the turn's index.
///
/// ```no_run
/// # fn demo(codec: std::sync::Arc<uniagent_core::codec::Codec>) {
/// use std::sync::Arc;
/// use uniagent_core::agent::TokenChatModel;
/// use uniagent_core::testing::{ScriptedTokenGenerator, ScriptedTurn};
/// use uniagent_core::{LengthLimits, Message};
///
/// let script = vec![ScriptedTurn::Reply(Message::assistant("done"))];
/// let generator = Arc::new(ScriptedTokenGenerator::new(codec.clone(), script));
/// let model = TokenChatModel::new(generator, codec, LengthLimits::default());
/// # }
/// ```
#[derive(Debug)]
pub struct ScriptedTokenGenerator {
    codec: Arc<Codec>,
    script: Vec<ScriptedTurn>,
    turns: Mutex<HashMap<String, usize>>,
    record: bool,
    requests: Mutex<Vec<GenerateRequest>>,
}

impl ScriptedTokenGenerator {
    /// A generator replaying `script` with `codec`, recording every request.
    pub fn new(codec: Arc<Codec>, script: Vec<ScriptedTurn>) -> Self {
        Self {
            codec,
            script,
            turns: Mutex::default(),
            record: true,
            requests: Mutex::default(),
        }
    }

    /// Stops recording requests (for load tests with many rollouts).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<GenerateRequest> {
        lock(&self.requests).clone()
    }

    /// The ids sampled for `turn` before the stop id, as [`Self::generate`] produces them.
    pub fn turn_ids(&self, turn: &ScriptedTurn) -> Result<Vec<u32>> {
        match turn {
            ScriptedTurn::Reply(m) => self.codec.encode(&assistant_text(m)),
            ScriptedTurn::FormatError { content, .. } => self.codec.encode(content),
            ScriptedTurn::Fail { .. } | ScriptedTurn::Hang => Ok(Vec::new()),
        }
    }
}

/// The text that follows the generation prompt in a Hermes-style (Qwen2.5) rendering of
/// assistant message `m`: its content, then each tool call as
/// `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>` on lines of their own.
///
/// ```
/// use serde_json::json;
/// use uniagent_core::testing::assistant_text;
/// use uniagent_core::{Message, ToolCall};
///
/// let m = Message::assistant_with_calls(None, vec![ToolCall::new("c", "echo", json!({"text": "ok"}))]);
/// assert_eq!(
///     assistant_text(&m),
///     "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"ok\"}}\n</tool_call>"
/// );
/// ```
pub fn assistant_text(m: &Message) -> String {
    let mut s = m.text().to_owned();
    for call in &m.tool_calls {
        let arguments = py_json_dumps(&call.function.arguments);
        s.push_str(&format!(
            "\n<tool_call>\n{{\"name\": \"{}\", \"arguments\": {arguments}}}\n</tool_call>",
            call.function.name
        ));
    }
    if m.text().is_empty() {
        s.trim_start_matches('\n').to_owned()
    } else {
        s
    }
}

fn model_error(message: String, retryable: bool) -> Error {
    Error::Model {
        backend: "scripted-token-generator".into(),
        message,
        retryable,
        source: None,
    }
}

#[async_trait]
impl TokenGenerator for ScriptedTokenGenerator {
    fn name(&self) -> &str {
        "scripted-token-generator"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let turn = {
            let mut turns = lock(&self.turns);
            let n = turns
                .entry(request.session_id.clone().unwrap_or_default())
                .or_insert(0);
            *n += 1;
            *n - 1
        };
        let stop = request
            .stop_token_ids
            .first()
            .copied()
            .unwrap_or(self.codec.eos_token_id());
        let max_new_tokens = request.max_new_tokens;
        if self.record {
            lock(&self.requests).push(request);
        }
        let step = self.script.get(turn).ok_or_else(|| {
            model_error(
                format!(
                    "script has {} turns; turn {turn} was requested",
                    self.script.len()
                ),
                false,
            )
        })?;
        match step {
            ScriptedTurn::Fail { message, retryable } => {
                return Err(model_error(message.clone(), *retryable))
            }
            ScriptedTurn::Hang => std::future::pending().await,
            ScriptedTurn::Reply(_) | ScriptedTurn::FormatError { .. } => {}
        }
        let mut ids = self.turn_ids(step)?;
        ids.push(stop);
        let finish_reason = if ids.len() > max_new_tokens {
            ids.truncate(max_new_tokens);
            FinishReason::Length
        } else {
            FinishReason::Stop
        };
        Ok(GenerateOutput {
            logprobs: Some(vec![SCRIPTED_LOGPROB; ids.len()]),
            token_ids: ids,
            finish_reason,
            weight_version: Some(turn as u64),
        })
    }
}
