//! Incremental tokenization into a [`RolloutCache`]: the prompt once, sampled tokens as they
//! came, and new messages rendered alone with the glue the template emits after an assistant
//! turn.
//!
//! # How the delta is found
//! The tokens to append after an assistant turn are found by rendering a small *window*: the
//! conversation's leading system message (if any), an empty user turn, the real last assistant
//! message, then the new messages. The delta is the text after the assistant's end-of-turn
//! token (the last eos occurrence in the window rendered without the new messages). Because the
//! eos is a special added token, the tokenizer splits there, so tokenizing the delta alone gives
//! exactly the ids a full render would have. The cost does not grow with the conversation.
//!
//! The window also tells whether the template is append-only here: if the render with the new
//! messages does not start with the render without them, the template rewrote the assistant
//! turn (Qwen3 drops past reasoning once a new user query follows). The cache then records
//! `append_only = false`; the sampled tokens stay as they were and only the suffix is appended.

use serde_json::{json, Value};

use super::{messages_to_json, tools_to_json, ChatInput, Codec, Kwargs};
use crate::error::{Error, Result};
use crate::message::{Message, Role, ToolSpec};
use crate::parsers::ToolCallError;
use crate::rollout::{LengthLimits, RolloutCache, TokenSource};

/// What [`Codec::append_sampled`] made of the sampled tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledTurn {
    /// The assistant message (pushed onto the cache): content without the end-of-turn token,
    /// reasoning split off at `</think>`, tool calls parsed by the codec's parser.
    pub message: Message,
    /// The decoded text, special tokens included.
    pub text: String,
    /// Whether the turn ended with a stop token (`false`: cut by a length limit).
    pub stopped: bool,
    /// A malformed tool call: the turn is kept as text, and this message can be shown to the
    /// model.
    pub tool_call_error: Option<ToolCallError>,
}

/// The ids to append after an assistant turn, with their sources.
#[derive(Debug, Default)]
pub(crate) struct Delta {
    pub spans: Vec<(Vec<u32>, TokenSource)>,
    pub append_only: bool,
}

impl Delta {
    pub fn ids(&self) -> Vec<u32> {
        self.spans
            .iter()
            .flat_map(|(ids, _)| ids.iter().copied())
            .collect()
    }
}

fn nth_end(text: &str, needle: &str, n: usize) -> Option<usize> {
    let mut pos = 0;
    for _ in 0..n {
        pos += text[pos..].find(needle)? + needle.len();
    }
    Some(pos)
}

impl Codec {
    /// The window render described in the module docs. `system` is the conversation's leading
    /// system message, `assistant` its last assistant message.
    pub(crate) fn window_delta(
        &self,
        system: Option<&Value>,
        assistant: &Value,
        new: &[Value],
        tools: &[Value],
        kwargs: &Kwargs,
        add_generation_prompt: bool,
    ) -> Result<Delta> {
        let mut window: Vec<Value> = system.into_iter().cloned().collect();
        window.push(json!({"role": "user", "content": ""}));
        window.push(assistant.clone());
        let base_len = window.len();
        let before = self.render(&ChatInput {
            messages: window.clone(),
            tools: tools.to_vec(),
            add_generation_prompt: false,
            template_kwargs: kwargs.clone(),
        })?;
        window.extend_from_slice(new);
        let after = self.render(&ChatInput {
            messages: window,
            tools: tools.to_vec(),
            add_generation_prompt,
            template_kwargs: kwargs.clone(),
        })?;
        let eos = self.eos_token.as_str();
        let turns = before.matches(eos).count();
        if turns == 0 || base_len == 0 {
            return Err(Error::Codec {
                message: format!("the chat template emits no `{eos}` after an assistant turn; cannot align appended messages"),
                source: None,
            });
        }
        let glue_start = nth_end(&before, eos, turns).unwrap_or(before.len());
        let glue = &before[glue_start..];
        let start = nth_end(&after, eos, turns).ok_or_else(|| Error::Codec {
            message: format!(
                "the template rendered fewer `{eos}` tokens once messages were appended"
            ),
            source: None,
        })?;
        let delta = &after[start..];
        let append_only = after.starts_with(&before);
        let (ids, offsets) = self.encode_with_offsets(delta)?;
        // Tokens inside the leading glue or the trailing generation prompt are template glue.
        let glue_len = if append_only && delta.starts_with(glue) {
            glue.len()
        } else {
            0
        };
        let gp = self.generation_prompt.as_str();
        let gp_start = if add_generation_prompt && !gp.is_empty() && delta.ends_with(gp) {
            delta.len() - gp.len()
        } else {
            delta.len()
        };
        let mut spans: Vec<(Vec<u32>, TokenSource)> = Vec::new();
        for (id, (s, _)) in ids.into_iter().zip(offsets) {
            let source = if s < glue_len || s >= gp_start {
                TokenSource::TemplateGlue
            } else {
                TokenSource::Observation
            };
            match spans.last_mut() {
                Some((run, src)) if *src == source => run.push(id),
                _ => spans.push((vec![id], source)),
            }
        }
        Ok(Delta { spans, append_only })
    }

    /// Starts a trajectory: renders `messages` with `tools`, the generation prompt and
    /// `template_kwargs`, and checks the prompt against `limits` (typed error, no truncation).
    pub fn start(
        &self,
        id: impl Into<String>,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
        template_kwargs: Kwargs,
        limits: LengthLimits,
    ) -> Result<RolloutCache> {
        if messages.last().is_some_and(|m| m.role == Role::Assistant) {
            return Err(Error::invalid_input(
                "a prompt must not end with an assistant message: the model would continue it",
            ));
        }
        let input = ChatInput {
            messages: messages_to_json(&messages)?,
            tools: tools_to_json(&tools)?,
            add_generation_prompt: true,
            template_kwargs: template_kwargs.clone(),
        };
        let ids = self.render_ids(&input)?;
        let mut cache = RolloutCache::with_tokens(id, messages, tools, ids, limits)?;
        cache.set_template_kwargs(template_kwargs);
        Ok(cache)
    }

    /// Appends non-assistant messages (tool results, user messages) after the last assistant
    /// turn: template glue and observation tokens (mask 0) ending with the generation prompt.
    /// With no messages, appends only the glue and the generation prompt.
    ///
    /// Fails with [`Error::LengthLimit`] if they do not fit (the cache is unchanged), and with
    /// [`Error::InvalidInput`] if the last message is not an assistant turn or a new message is.
    pub fn append_messages(&self, cache: &mut RolloutCache, messages: &[Message]) -> Result<()> {
        if messages.iter().any(|m| m.role == Role::Assistant) {
            return Err(Error::invalid_input(
                "append_messages takes tool and user messages; sampled turns go through append_sampled",
            ));
        }
        let last = cache
            .messages()
            .last()
            .ok_or_else(|| Error::invalid_input("the rollout has no messages"))?;
        if last.role != Role::Assistant {
            return Err(Error::invalid_input(
                "messages can only be appended after an assistant turn; pass all observations of a step in one call",
            ));
        }
        let ends_with_stop = cache
            .tokens()
            .ok_or_else(|| {
                Error::invalid_input(format!("rollout `{}` has no token trace", cache.id()))
            })?
            .response_ids
            .last()
            .is_some_and(|id| self.stop_ids.contains(id));
        let system = cache
            .messages()
            .first()
            .filter(|m| matches!(m.role, Role::System | Role::Developer));
        let system_json = match system {
            Some(m) => messages_to_json(std::slice::from_ref(m))?.pop(),
            None => None,
        };
        let assistant_json = messages_to_json(std::slice::from_ref(last))?
            .pop()
            .unwrap_or(Value::Null);
        let delta = self.window_delta(
            system_json.as_ref(),
            &assistant_json,
            &messages_to_json(messages)?,
            &tools_to_json(cache.tools())?,
            cache.template_kwargs(),
            true,
        )?;
        let mut spans = delta.spans;
        if !ends_with_stop {
            // The turn was cut before its end-of-turn token: the template closes it.
            spans.insert(0, (vec![self.eos_id], TokenSource::TemplateGlue));
        }
        let total: usize = spans.iter().map(|(ids, _)| ids.len()).sum();
        cache.check_room_for(total)?;
        for (ids, source) in &spans {
            cache.append_inserted(ids, *source)?;
        }
        if !delta.append_only {
            cache.mark_not_append_only();
        }
        for m in messages {
            cache.push_message(m.clone());
        }
        Ok(())
    }

    /// Appends tokens sampled by the policy (mask 1) with their logprobs and weight version,
    /// decodes them and parses the assistant message, which is pushed onto the cache.
    ///
    /// If the last message is already an assistant turn, the glue and generation prompt are
    /// appended first. A malformed tool call is not an error: it is returned in
    /// [`SampledTurn::tool_call_error`].
    pub fn append_sampled(
        &self,
        cache: &mut RolloutCache,
        ids: &[u32],
        logprobs: &[f32],
        weight_version: Option<u64>,
    ) -> Result<SampledTurn> {
        if ids.len() != logprobs.len() {
            return Err(Error::invalid_input(format!(
                "sampled tokens need one logprob each: {} ids, {} logprobs",
                ids.len(),
                logprobs.len()
            )));
        }
        if cache
            .messages()
            .last()
            .is_some_and(|m| m.role == Role::Assistant)
        {
            self.append_messages(cache, &[])?;
        }
        cache.append_sampled(ids, logprobs, weight_version)?;
        if !self.is_canonical_after_generation_prompt(ids, cache.template_kwargs())? {
            cache.mark_not_append_only();
        }
        let stopped = ids.last().is_some_and(|id| self.stop_ids.contains(id));
        let body = if stopped { &ids[..ids.len() - 1] } else { ids };
        let text = self.decode(ids, false)?;
        let body_text = self.decode(body, false)?;
        let (reasoning, content) = split_reasoning(&body_text);
        let (content, tool_calls, tool_call_error) = match self.tool_parser {
            Some(format) => match format.parse(&content, cache.tools()) {
                Ok(parsed) => (parsed.content, parsed.calls, None),
                Err(err) => (content, Vec::new(), Some(err)),
            },
            None => (content, Vec::new(), None),
        };
        let mut message = Message::assistant_with_calls(Some(content), tool_calls);
        message.reasoning_content = reasoning;
        cache.push_message(message.clone());
        Ok(SampledTurn {
            message,
            text,
            stopped,
            tool_call_error,
        })
    }
}

impl Codec {
    /// Whether `ids`, following the generation prompt, are what the tokenizer makes of their
    /// text there. When not (the policy sampled a non-canonical split, or the text merges with
    /// the end of the generation prompt, e.g. a leading newline after `assistant\n`), a full
    /// render would tokenize the turn differently: the stream is no longer append-only.
    /// The check costs one tokenization of the turn, independent of the conversation length.
    fn is_canonical_after_generation_prompt(&self, ids: &[u32], kwargs: &Kwargs) -> Result<bool> {
        let gp = if kwargs.is_empty() {
            self.generation_prompt.clone()
        } else {
            self.probe_generation_prompt_with(kwargs)?
        };
        let gp_ids = self.encode(&gp)?;
        let text = self.decode(ids, false)?;
        let joined = self.encode(&format!("{gp}{text}"))?;
        Ok(joined.len() == gp_ids.len() + ids.len()
            && joined.starts_with(&gp_ids)
            && joined.ends_with(ids))
    }
}

/// Splits `<think>reasoning</think>content` the way Qwen3's template reads it back.
fn split_reasoning(text: &str) -> (Option<String>, String) {
    match (text.split_once("</think>"), text.rsplit_once("</think>")) {
        (Some((before, _)), Some((_, after))) => {
            let reasoning = before.trim_end_matches('\n');
            let reasoning = reasoning
                .rsplit_once("<think>")
                .map_or(reasoning, |(_, r)| r)
                .trim_start_matches('\n');
            (
                Some(reasoning.to_owned()),
                after.trim_start_matches('\n').to_owned(),
            )
        }
        _ => (None, text.to_owned()),
    }
}
