//! [`ScriptedTokenChatModel`]: a token-level scripted model over a character codec.

use std::sync::Arc;

use async_trait::async_trait;

use super::model::ScriptedTurn;
use crate::error::{Error, Result};
use crate::message::{Message, ToolSpec};
use crate::model::{AssistantTurn, ChatModel, FinishReason, ModelCapabilities};
use crate::rollout::{LengthLimits, RolloutCache, TokenSource};
use crate::sampling::SamplingParams;

/// The end-of-turn token of the character codec (`'\0'` never occurs in rendered text).
pub const END_OF_TURN: u32 = 0;

/// The logprob every sampled token gets.
pub const SCRIPTED_LOGPROB: f32 = -0.5;

/// Renders one message the way the character codec's "template" does.
pub fn render_message(m: &Message) -> String {
    let calls = if m.tool_calls.is_empty() {
        String::new()
    } else {
        serde_json::to_string(&m.tool_calls).unwrap_or_default()
    };
    format!("<|{}|>{}{calls}", m.role.as_str(), m.text())
}

/// The tokens of `text`: one per character.
pub fn char_ids(text: &str) -> Vec<u32> {
    text.chars().map(u32::from).collect()
}

/// The generation prompt: what follows every non-assistant block.
pub const GENERATION_PROMPT: &str = "<|assistant|>";

/// A token-level [`ChatModel`] that replays a script through a character "codec": every
/// character is one token id (its Unicode scalar value), a message renders as
/// `<|role|>content[tool calls as JSON]`, an assistant turn ends with [`END_OF_TURN`], and
/// non-assistant messages are appended as `"\n"` glue plus their render plus
/// [`GENERATION_PROMPT`]. It fills the rollout cache like a real token-level backend: it checks
/// the length budget before sampling, cuts a turn that does not fit (finish reason `length`,
/// tool calls dropped), and appends observations with mask 0.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> uniagent_core::Result<()> {
/// use uniagent_core::testing::{ScriptedTokenChatModel, ScriptedTurn};
/// use uniagent_core::{ChatModel, LengthLimits, Message, SamplingParams};
///
/// let model = ScriptedTokenChatModel::new(vec![ScriptedTurn::Reply(Message::assistant("ok"))], LengthLimits::default());
/// let mut cache = model.start("t", vec![Message::user("hi")], vec![]).await?;
/// model.query(&mut cache, &SamplingParams::default()).await?;
/// let trace = cache.tokens().unwrap();
/// // The generation prompt `<|assistant|>` ends the prompt; "ok" and the end-of-turn token
/// // are sampled.
/// assert_eq!(trace.prompt_ids.len(), "<|user|>hi<|assistant|>".chars().count());
/// assert_eq!(trace.response_ids.len(), "ok".chars().count() + 1);
/// assert!(trace.response_mask.iter().all(|&m| m == 1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedTokenChatModel {
    script: Arc<Vec<ScriptedTurn>>,
    limits: LengthLimits,
}

impl ScriptedTokenChatModel {
    /// A model replaying `script` (turn `i` answers with `script[i]`) under `limits`.
    pub fn new(script: Vec<ScriptedTurn>, limits: LengthLimits) -> Self {
        Self {
            script: Arc::new(script),
            limits,
        }
    }

    /// The full render of a conversation (with the generation prompt when it does not end
    /// with an assistant turn and `add_generation_prompt` is set): the oracle that the
    /// incrementally built trace must equal.
    pub fn full_render(messages: &[Message], add_generation_prompt: bool) -> Vec<u32> {
        let mut ids = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if i > 0 && messages[i - 1].role == crate::Role::Assistant {
                ids.push(u32::from('\n'));
            }
            ids.extend(char_ids(&render_message(m)));
            if m.role == crate::Role::Assistant {
                ids.push(END_OF_TURN);
            }
        }
        if add_generation_prompt
            && messages
                .last()
                .is_some_and(|m| m.role != crate::Role::Assistant)
        {
            ids.extend(char_ids(GENERATION_PROMPT));
        }
        ids
    }
}

fn model_error(message: String, retryable: bool) -> Error {
    Error::Model {
        backend: "scripted-token".into(),
        message,
        retryable,
        source: None,
    }
}

#[async_trait]
impl ChatModel for ScriptedTokenChatModel {
    fn name(&self) -> &str {
        "scripted-token"
    }

    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities::token_level()
    }

    async fn start(
        &self,
        id: &str,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
    ) -> Result<RolloutCache> {
        let mut text: String = messages.iter().map(render_message).collect();
        text.push_str(GENERATION_PROMPT);
        RolloutCache::with_tokens(id, messages, tools, char_ids(&text), self.limits)
    }

    async fn query(
        &self,
        cache: &mut RolloutCache,
        sampling: &SamplingParams,
    ) -> Result<AssistantTurn> {
        sampling.validate()?;
        let budget = cache.generation_budget(sampling.max_tokens.map(|t| t as usize))?;
        let index = cache.assistant_turns() as usize;
        let step = self.script.get(index).cloned().ok_or_else(|| {
            model_error(
                format!(
                    "script has {} turns; turn {index} was requested",
                    self.script.len()
                ),
                false,
            )
        })?;
        let (message, format_error) = match step {
            ScriptedTurn::Reply(m) => (m, None),
            ScriptedTurn::FormatError { content, error } => {
                (Message::assistant(content), Some(error))
            }
            ScriptedTurn::Fail { message, retryable } => {
                return Err(model_error(message, retryable))
            }
            ScriptedTurn::Hang => std::future::pending().await,
        };
        // The generation prompt is already in the context; the sampled part is the content.
        let rendered = render_message(&message);
        let sampled_text = rendered
            .strip_prefix(GENERATION_PROMPT)
            .unwrap_or(&rendered);
        let mut ids = char_ids(sampled_text);
        ids.push(END_OF_TURN);
        let (message, finish_reason, format_error) = if ids.len() > budget {
            ids.truncate(budget);
            let text: String = ids.iter().filter_map(|&i| char::from_u32(i)).collect();
            (Message::assistant(text), FinishReason::Length, None)
        } else {
            let finish = if message.tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            (message, finish, format_error)
        };
        let logprobs = vec![SCRIPTED_LOGPROB; ids.len()];
        cache.append_sampled(&ids, &logprobs, Some(index as u64))?;
        cache.push_message(message.clone());
        Ok(AssistantTurn {
            message,
            finish_reason,
            format_error,
            sampled_tokens: ids.len(),
        })
    }

    async fn append(&self, cache: &mut RolloutCache, messages: Vec<Message>) -> Result<()> {
        if messages.iter().any(|m| m.role == crate::Role::Assistant) {
            return Err(Error::invalid_input(
                "append takes non-assistant messages only",
            ));
        }
        let mut text = String::from("\n");
        text.extend(messages.iter().map(render_message));
        text.push_str(GENERATION_PROMPT);
        cache.append_inserted(&char_ids(&text), TokenSource::Observation)?;
        for m in messages {
            cache.push_message(m);
        }
        Ok(())
    }
}
