//! Rebuilding a whole conversation turn by turn, the way a rollout does (the `codec
//! incremental` command), with an exact check of append-only-ness against full renders.

use serde::Serialize;
use serde_json::Value;

use super::incremental::{Context, Delta, DeltaRequest};
use super::{ChatInput, Codec};
use crate::error::{Error, Result};

/// The token stream of a replayed conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replay {
    /// Prompt and every appended token, in order.
    pub ids: Vec<u32>,
    /// 1 on the sampled spans of assistant messages, 0 elsewhere.
    pub mask: Vec<u8>,
    /// Whether, at every step, the full render's ids extended the ids built so far.
    pub append_only: bool,
}

fn role(m: &Value) -> Option<&str> {
    m.get("role").and_then(Value::as_str)
}

fn is_assistant(m: &Value) -> bool {
    role(m) == Some("assistant")
}

impl Replay {
    fn push(&mut self, ids: &[u32], mask: u8) {
        self.ids.extend_from_slice(ids);
        self.mask.extend(std::iter::repeat_n(mask, ids.len()));
    }
}

impl Codec {
    /// The delta after the assistant message `messages[i]` (sampled as `sampled`), windowed
    /// as in a rollout, falling back to the full context like [`Codec::append_messages`].
    #[allow(clippy::too_many_arguments)]
    fn replay_delta(
        &self,
        input: &ChatInput,
        system: Option<&Value>,
        i: usize,
        sampled: Option<&str>,
        new: &[Value],
        add_generation_prompt: bool,
    ) -> Result<Delta> {
        let messages = &input.messages;
        let req = DeltaRequest {
            context: Context::Window(system),
            assistant: &messages[i],
            sampled,
            new,
            tools: &input.tools,
            kwargs: &input.template_kwargs,
            add_generation_prompt,
        };
        self.delta_with_fallback(req, || Ok(messages[..i].to_vec()))
    }

    fn input_with(
        &self,
        base: &ChatInput,
        messages: &[Value],
        add_generation_prompt: bool,
    ) -> ChatInput {
        ChatInput {
            messages: messages.to_vec(),
            tools: base.tools.clone(),
            add_generation_prompt,
            template_kwargs: base.template_kwargs.clone(),
        }
    }

    /// The sampled span of the assistant message `messages[i]`: the ids after the render of
    /// `messages[..i]` with the generation prompt, through the first eos id, in the render of
    /// `messages[..=i]`. The flag is `false` when that render does not extend the prompt's ids.
    fn sampled_span(&self, input: &ChatInput, i: usize) -> Result<(Vec<u32>, bool)> {
        let prompt_text = self.render(&self.input_with(input, &input.messages[..i], true))?;
        let full_text = self.render(&self.input_with(input, &input.messages[..=i], false))?;
        let prompt = self.encode(&prompt_text)?;
        let full = self.encode(&full_text)?;
        let (mut span, exact) = if full.starts_with(&prompt) {
            (full[prompt.len()..].to_vec(), true)
        } else if let Some(rest) = full_text.strip_prefix(prompt_text.as_str()) {
            (self.encode(rest)?, false)
        } else {
            let common = prompt.iter().zip(&full).take_while(|(a, b)| a == b).count();
            (full[common..].to_vec(), false)
        };
        if let Some(end) = span.iter().position(|id| *id == self.eos_id) {
            span.truncate(end + 1);
        }
        Ok((span, exact))
    }

    /// Rebuilds `input` as a rollout would: the prompt (messages before the first assistant
    /// message, with the generation prompt), each assistant message as sampled tokens (mask 1),
    /// each run of other messages appended incrementally ([`Codec::append_messages`]' method),
    /// and after a final assistant message its trailing glue (plus the generation prompt if
    /// `input.add_generation_prompt`). `append_only` compares every step with a full render.
    pub fn replay(&self, input: &ChatInput) -> Result<Replay> {
        let messages = &input.messages;
        let mut out = Replay {
            ids: Vec::new(),
            mask: Vec::new(),
            append_only: true,
        };
        let Some(first) = messages.iter().position(is_assistant) else {
            let ids = self.render_ids(input)?;
            out.push(&ids, 0);
            return Ok(out);
        };
        if first == 0 {
            return Err(Error::invalid_input(
                "the conversation starts with an assistant message: there is no prompt to sample it from",
            ));
        }
        let system = messages
            .first()
            .filter(|m| matches!(role(m), Some("system" | "developer")));
        let prompt = self.render_ids(&self.input_with(input, &messages[..first], true))?;
        out.push(&prompt, 0);
        let mut i = first;
        let mut sampled: Option<String> = None;
        while i < messages.len() {
            if is_assistant(&messages[i]) {
                if i > 0 && is_assistant(&messages[i - 1]) {
                    let delta =
                        self.replay_delta(input, system, i - 1, sampled.as_deref(), &[], true)?;
                    out.push(&delta.ids(), 0);
                    out.append_only &= delta.append_only;
                }
                let (span, exact) = self.sampled_span(input, i)?;
                out.append_only &= exact;
                out.push(&span, 1);
                sampled = Some(self.decode(&span, false)?);
                let full = self.render_ids(&self.input_with(input, &messages[..=i], false))?;
                out.append_only &= full.starts_with(&out.ids);
                i += 1;
                continue;
            }
            let end = messages[i..]
                .iter()
                .position(is_assistant)
                .map_or(messages.len(), |k| i + k);
            let gen = end < messages.len() || input.add_generation_prompt;
            let delta = self.replay_delta(
                input,
                system,
                i - 1,
                sampled.as_deref(),
                &messages[i..end],
                gen,
            )?;
            out.push(&delta.ids(), 0);
            out.append_only &= delta.append_only;
            let full = self.render_ids(&self.input_with(input, &messages[..end], gen))?;
            out.append_only &= full == out.ids;
            i = end;
        }
        if messages.last().is_some_and(is_assistant) {
            let delta = self.replay_delta(
                input,
                system,
                messages.len() - 1,
                sampled.as_deref(),
                &[],
                input.add_generation_prompt,
            )?;
            out.push(&delta.ids(), 0);
            out.append_only &= delta.append_only;
            let full = self.render_ids(input)?;
            out.append_only &= full == out.ids;
        }
        Ok(out)
    }
}
