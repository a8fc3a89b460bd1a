//! Incremental tokenization into a [`RolloutCache`]: the prompt once, sampled tokens as they
//! came, and new messages rendered alone with the glue the template emits after an assistant
//! turn.
//!
//! # How the delta is found
//! Nothing about a template's turn layout is assumed; the template itself is asked. Three
//! renders are diffed: the context before the last assistant turn with the generation prompt
//! (`P`), the context plus that turn (`B`), and that plus the new messages (`A`). The turn's
//! sampled span is what `B` adds to `P`, through the first eos (or through the sampled text
//! when it is known, or to the end of the turn when there is no eos: `docs/cli.md`, `codec`);
//! the delta is the text of `A` after it. Special tokens split the tokenizer's input, so
//! tokenizing the delta alone gives the ids a full render has there.
//!
//! The context is normally a small *window* (the leading system message and an empty user
//! turn), so the cost does not grow with the conversation. [`TemplateProbe::window_exact`]
//! checks once per template, on sentinel conversations, that windows give the same tokens as
//! full renders; where they do not, or where a template rejects the window, the whole
//! conversation is the context.
//!
//! The renders also tell whether the template is append-only here: if `A` does not start with
//! the turn as sampled, the template rewrote it (Qwen3 drops past reasoning once a new user
//! query follows). The cache then records `append_only = false`; the sampled tokens stay as
//! they were and only the suffix is appended.
//!
//! [`TemplateProbe::window_exact`]: super::TemplateProbe::window_exact

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
    /// The turn's text after the reasoning split and before the tool parser, as sampled (not
    /// trimmed): what an OpenAI-compatible server answers as content (vLLM returns the
    /// sampled text as is), while [`message`](Self::message) holds the parser's trimmed view.
    pub content_as_sampled: String,
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
    /// The text the template put between the turn's sampled span and the new messages.
    pub glue: String,
}

/// The last window prompt rendered (see [`Codec::delta_after`]).
#[derive(Debug)]
pub(crate) struct WindowPrompt {
    system: Option<Value>,
    tools: Vec<Value>,
    kwargs: Kwargs,
    prompt: String,
}

impl Delta {
    pub(crate) fn ids(&self) -> Vec<u32> {
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

/// Where in `turn` (a render ending with an assistant turn) that turn's sampled span ends, and
/// whether `turn` extends `prompt` (the render of what precedes the turn, with the generation
/// prompt). The rule (`docs/cli.md`, `codec`): the span starts after the generation prompt
/// and runs through the first eos, or to the end of the turn's render if it has none. When the
/// actually sampled text is known and the template rendered it verbatim, the span ends after it
/// (a model stopped by another stop id, or cut by a length limit, leaves the rest to the template).
fn sampled_end(prompt: &str, turn: &str, sampled: Option<&str>, eos: &str) -> (usize, bool) {
    let Some(rest) = turn.strip_prefix(prompt) else {
        // The turn's render rewrote the prompt: align on the text they share.
        let common = common_prefix(prompt, turn);
        let rest = &turn[common..];
        return (
            common + rest.find(eos).map_or(rest.len(), |p| p + eos.len()),
            false,
        );
    };
    match sampled {
        Some(s) if rest.starts_with(s) => (prompt.len() + s.len(), true),
        // The message kept for the turn renders differently from the sampled text (a parser
        // normalised it): what follows the turn is still the template's, after its eos. Only
        // the caller's full render can tell whether the stream is append-only there.
        _ => (
            prompt.len() + rest.find(eos).map_or(rest.len(), |p| p + eos.len()),
            true,
        ),
    }
}

/// Length of the longest common prefix of `a` and `b`, on a char boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}

/// The window's stand-in for the conversation before the assistant turn.
fn empty_user() -> Value {
    json!({"role": "user", "content": ""})
}

/// What precedes the assistant turn in a delta render.
#[derive(Clone, Copy)]
pub(crate) enum Context<'a> {
    /// The small constant-cost window: the leading system message (if any) and an empty user
    /// turn.
    Window(Option<&'a Value>),
    /// The real conversation before the assistant turn (cost grows with it; exact always).
    Full(&'a [Value]),
}

/// The arguments of one delta computation.
#[derive(Clone, Copy)]
pub(crate) struct DeltaRequest<'a> {
    pub context: Context<'a>,
    pub assistant: &'a Value,
    /// The text the policy sampled for `assistant`, when known.
    pub sampled: Option<&'a str>,
    pub new: &'a [Value],
    pub tools: &'a [Value],
    pub kwargs: &'a Kwargs,
    pub add_generation_prompt: bool,
}

impl Codec {
    /// The ids to append after an assistant turn: three renders (the context with the
    /// generation prompt, the context plus the turn, and that plus `new`), then the text after
    /// the turn's sampled span. See the module docs.
    pub(crate) fn delta_after(&self, req: &DeltaRequest<'_>) -> Result<Delta> {
        let render = |messages: &[&Value], add_generation_prompt: bool| {
            self.template
                .render_parts(messages, req.tools, add_generation_prompt, req.kwargs)
        };
        let empty_user = empty_user();
        // The conversation is borrowed, never cloned: renders serialise it from references.
        let (prompt, mut messages): (String, Vec<&Value>) = match req.context {
            Context::Window(system) => {
                let mut w: Vec<&Value> = Vec::with_capacity(3 + req.new.len());
                w.extend(system);
                w.push(&empty_user);
                (self.window_prompt(system, req.tools, req.kwargs)?, w)
            }
            Context::Full(before) => {
                let before: Vec<&Value> = before.iter().collect();
                (render(&before, true)?, before)
            }
        };
        messages.push(req.assistant);
        let turn_len = messages.len();
        messages.extend(req.new);
        let after = render(&messages, req.add_generation_prompt)?;
        if let Some(sampled) = req.sampled {
            // The common case costs one render: the new render extends the prompt plus what
            // was sampled, so the delta is what follows.
            let end = prompt.len() + sampled.len();
            if after.starts_with(prompt.as_str()) && after.get(prompt.len()..end) == Some(sampled) {
                let delta = &after[end..];
                // A turn cut before its end-of-turn token is closed by the template: that
                // token is glue too.
                let closed = format!("{}{}", self.eos_token, self.turn_glue);
                let glue = if delta.starts_with(&closed) {
                    closed.as_str()
                } else {
                    self.turn_glue.as_str()
                };
                return self.label(delta, glue, true, req.add_generation_prompt);
            }
        }
        messages.truncate(turn_len);
        let before = render(&messages, false)?;
        let eos = self.eos_token.as_str();
        let (end, exact) = sampled_end(&prompt, &before, req.sampled, eos);
        let turn = &before[..end];
        let (start, append_only) = if after.starts_with(turn) {
            (end, exact)
        } else if turn.ends_with(eos) {
            // The template rewrote the turn (e.g. dropped its reasoning): continue after the
            // same end-of-turn token in the new render.
            let k = turn.matches(eos).count();
            (nth_end(&after, eos, k).unwrap_or(after.len()), false)
        } else {
            (common_prefix(turn, &after), false)
        };
        self.label(
            &after[start..],
            &before[end..],
            append_only,
            req.add_generation_prompt,
        )
    }

    /// The text of `assistant`'s sampled span when rendered after `context` (the generation
    /// prompt's render extended through the first eos, or the whole turn): what a policy that
    /// the template describes exactly would have sampled there.
    pub(crate) fn sampled_text(
        &self,
        context: &[Value],
        assistant: &Value,
        tools: &[Value],
        kwargs: &Kwargs,
    ) -> Result<Option<String>> {
        let input = |messages: Vec<Value>, add_generation_prompt: bool| ChatInput {
            messages,
            tools: tools.to_vec(),
            add_generation_prompt,
            template_kwargs: kwargs.clone(),
        };
        let prompt = self.render(&input(context.to_vec(), true))?;
        let mut with_turn = context.to_vec();
        with_turn.push(assistant.clone());
        let turn = self.render(&input(with_turn, false))?;
        let (end, exact) = sampled_end(&prompt, &turn, None, &self.eos_token);
        Ok(exact.then(|| turn[prompt.len()..end].to_owned()))
    }

    /// Tokenizes a delta, labelling its leading `glue` and its trailing generation prompt as
    /// template glue and the rest as observation (all mask 0).
    fn label(
        &self,
        delta: &str,
        glue: &str,
        append_only: bool,
        add_generation_prompt: bool,
    ) -> Result<Delta> {
        let (ids, offsets) = self.encode_with_offsets(delta)?;
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
        Ok(Delta {
            spans,
            append_only,
            glue: glue.to_owned(),
        })
    }

    /// The window's prompt render (system message, empty user turn, generation prompt),
    /// cached for the last system/tools/kwargs combination: a rollout keeps all three.
    fn window_prompt(
        &self,
        system: Option<&Value>,
        tools: &[Value],
        kwargs: &Kwargs,
    ) -> Result<String> {
        if let Ok(cache) = self.window_prompt_cache.lock() {
            if let Some(c) = cache.as_ref() {
                if c.system.as_ref() == system && c.tools == tools && &c.kwargs == kwargs {
                    return Ok(c.prompt.clone());
                }
            }
        }
        let empty_user = empty_user();
        let mut messages: Vec<&Value> = system.into_iter().collect();
        messages.push(&empty_user);
        let prompt = self.template.render_parts(&messages, tools, true, kwargs)?;
        if let Ok(mut cache) = self.window_prompt_cache.lock() {
            *cache = Some(WindowPrompt {
                system: system.cloned(),
                tools: tools.to_vec(),
                kwargs: kwargs.clone(),
                prompt: prompt.clone(),
            });
        }
        Ok(prompt)
    }

    /// [`Codec::delta_after`] on `req`'s window, or on the full context (`context()`) when the
    /// window cannot be rendered (the template rejects the synthetic conversation) or the
    /// template's turn structure is not local ([`TemplateProbe::window_exact`]).
    ///
    /// [`TemplateProbe::window_exact`]: super::TemplateProbe::window_exact
    pub(crate) fn delta_with_fallback(
        &self,
        req: DeltaRequest<'_>,
        context: impl FnOnce() -> Result<Vec<Value>>,
    ) -> Result<Delta> {
        if self.window_exact() {
            if let Ok(delta) = self.delta_after(&req) {
                return Ok(delta);
            }
        }
        let full = context()?;
        self.delta_after(&DeltaRequest {
            context: Context::Full(&full),
            ..req
        })
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
        let trace = cache.tokens().ok_or_else(|| {
            Error::invalid_input(format!("rollout `{}` has no token trace", cache.id()))
        })?;
        let ends_with_stop = trace
            .response_ids
            .last()
            .is_some_and(|id| self.stop_ids.contains(id));
        // The last turn's sampled tokens: the trailing mask-1 run.
        let run = trace
            .response_mask
            .iter()
            .rev()
            .take_while(|m| **m == 1)
            .count();
        let sampled_ids = &trace.response_ids[trace.response_ids.len() - run..];
        let sampled = if run > 0 {
            Some(self.decode_turn(sampled_ids)?)
        } else {
            None
        };
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
        let new = messages_to_json(messages)?;
        let tools = tools_to_json(cache.tools())?;
        let history = cache.messages();
        let context = || messages_to_json(&history[..history.len() - 1]);
        let req = DeltaRequest {
            context: Context::Window(system_json.as_ref()),
            assistant: &assistant_json,
            sampled: sampled.as_deref(),
            new: &new,
            tools: &tools,
            kwargs: cache.template_kwargs(),
            add_generation_prompt: true,
        };
        let delta = self.delta_with_fallback(req, context)?;
        let mut spans = delta.spans;
        let delta_closes = spans
            .first()
            .and_then(|(ids, _)| ids.first())
            .is_some_and(|id| *id == self.eos_id);
        if !ends_with_stop && !delta_closes {
            // The turn was cut before its end-of-turn token (a length limit), and the delta
            // starts after the template's close: the masked-out turn, or a sampled text the
            // kept message renders differently (a parser trimmed it). The template closes the
            // turn, so that token is glue, or the next prompt would be a context the template
            // never produces.
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
        let text = self.decode(ids, false)?;
        if let Ok(mut memo) = self.last_turn.lock() {
            *memo = Some((ids.to_vec(), text.clone()));
        }
        if !self.is_canonical_after_generation_prompt(ids, &text, cache.template_kwargs())? {
            cache.mark_not_append_only();
        }
        let stopped = ids.last().is_some_and(|id| self.stop_ids.contains(id));
        let body = if stopped { &ids[..ids.len() - 1] } else { ids };
        let body_text = self.decode(body, false)?;
        let (reasoning, content) = split_reasoning(&body_text);
        let content_as_sampled = content.clone();
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
            content_as_sampled,
            stopped,
            tool_call_error,
        })
    }
}

impl Codec {
    /// The text of a sampled turn's ids: the text [`Codec::append_sampled`] decoded when the
    /// ids are that turn's (the common case, an observation after a sampled turn), otherwise
    /// decoded again. Decoding is deterministic, so either way the text is the same.
    fn decode_turn(&self, ids: &[u32]) -> Result<String> {
        if let Ok(memo) = self.last_turn.lock() {
            if let Some((memo_ids, text)) = memo.as_ref() {
                if memo_ids == ids {
                    return Ok(text.clone());
                }
            }
        }
        self.decode(ids, false)
    }

    /// Whether `ids` (decoded: `text`), following the generation prompt, are what the
    /// tokenizer makes of their text there. When not (the policy sampled a non-canonical
    /// split, or the text merges with the end of the generation prompt, e.g. a leading
    /// newline after `assistant\n`), a full render would tokenize the turn differently: the
    /// stream is no longer append-only.
    /// The check costs one tokenization of the turn, independent of the conversation length.
    fn is_canonical_after_generation_prompt(
        &self,
        ids: &[u32],
        text: &str,
        kwargs: &Kwargs,
    ) -> Result<bool> {
        let gp = if kwargs.is_empty() {
            self.generation_prompt.clone()
        } else {
            match self.probe_generation_prompt_with(kwargs) {
                Ok(gp) => gp,
                // No generation prompt to probe: nothing to compare the turn's start with.
                Err(_) => return Ok(true),
            }
        };
        let gp_ids = self.encode(&gp)?;
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
