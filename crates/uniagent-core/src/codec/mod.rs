//! The token-exact codec: a Hugging Face tokenizer plus the model's own chat template.
//!
//! [`Codec`] loads a model directory (`tokenizer.json`, `tokenizer_config.json`, optionally
//! `chat_template.jinja` and `generation_config.json`), renders chat templates with
//! `transformers`' semantics ([`ChatTemplate`]) and builds a [`RolloutCache`] incrementally:
//! sampled tokens are kept as the policy produced them, and new non-assistant messages are
//! tokenized alone together with the template glue that follows an assistant turn.
//!
//! Any Hugging Face chat template works, not only the Qwen layout: the turn structure is
//! learned by probing the template ([`TemplateProbe`]), values behave as in Python's `jinja2`
//! (`None`, `True`, `1e-05`, `{'k': 1}`, `for` over `None` raises, `|map` is a generator),
//! `|safe` strings are `jinja2`'s `Markup` (`Markup + str` HTML-escapes the `str`, as MeetKai
//! Functionary v3.1's tool list relies on), `{% generation %}` blocks render, and templates
//! using a feature the codec cannot reproduce (an escaping `{% autoescape %}` block) are
//! refused up front with an [`UnsupportedTemplate`] error naming it. The corpus test
//! (`tests/codec_corpus.rs`) checks renders, errors and incremental ids/masks against
//! `transformers` on 75 real templates.
//!
//! ```no_run
//! use uniagent_core::codec::Codec;
//! use uniagent_core::{LengthLimits, Message};
//!
//! let codec = Codec::from_dir("models/qwen3")?;
//! let mut cache = codec.start("traj-1", vec![Message::user("hi")], vec![], Default::default(), LengthLimits::default())?;
//! let sampled = codec.encode("Hello!<|im_end|>")?;
//! let logprobs = vec![-0.1; sampled.len()];
//! let turn = codec.append_sampled(&mut cache, &sampled, &logprobs, Some(0))?;
//! assert_eq!(turn.message.text(), "Hello!");
//! codec.append_messages(&mut cache, &[Message::user("thanks")])?;
//! # Ok::<(), uniagent_core::Error>(())
//! ```
//!
//! [`RolloutCache`]: crate::RolloutCache

mod bpe;
mod incremental;
mod load;
mod markup;
mod probe;
mod pyjson;
mod pyrepr;
mod render_cache;
mod replay;
mod rerender;
mod syntax;
mod template;
mod unsupported;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

pub use incremental::SampledTurn;
pub use probe::TemplateProbe;
pub use pyjson::{py_float_repr, py_json_dumps, py_json_dumps_with, PyJsonOptions};
pub use replay::Replay;
pub use template::{ChatInput, ChatTemplate};
pub use unsupported::{UnsupportedFeature, UnsupportedTemplate};

use crate::error::{Error, Result};
use crate::message::{Message, ToolSpec};
use crate::parsers::ToolCallFormat;

/// Tokenizer + chat template of one model, with the facts about its turn structure.
#[derive(Debug)]
pub struct Codec {
    tokenizer: tokenizers::Tokenizer,
    /// The hand-written encoder, for the tokenizer shapes it reproduces exactly.
    fast: Option<bpe::FastBpe>,
    template: ChatTemplate,
    eos_token: String,
    eos_id: u32,
    stop_ids: Vec<u32>,
    generation_prompt: String,
    window_exact: bool,
    turn_glue: String,
    window_prompt_cache: std::sync::Mutex<Option<incremental::WindowPrompt>>,
    /// The last turn [`Codec::append_sampled`] decoded (ids and text): the observation append
    /// that follows needs the same text.
    last_turn: std::sync::Mutex<Option<(Vec<u32>, String)>>,
    tool_parser: Option<ToolCallFormat>,
}

impl Codec {
    /// Builds a codec from its parts. `eos_token` must be a single added token of the
    /// tokenizer; `extra_stop_ids` are further ids that end a generation.
    pub fn new(
        tokenizer: tokenizers::Tokenizer,
        template: ChatTemplate,
        eos_token: impl Into<String>,
        extra_stop_ids: &[u32],
    ) -> Result<Self> {
        let eos_token = eos_token.into();
        let eos_id = tokenizer
            .token_to_id(&eos_token)
            .ok_or_else(|| Error::Codec {
                message: format!("eos token `{eos_token}` is not in the vocabulary"),
                source: None,
            })?;
        let mut stop_ids = vec![eos_id];
        for id in extra_stop_ids {
            if !stop_ids.contains(id) {
                stop_ids.push(*id);
            }
        }
        let fast = bpe::FastBpe::from_tokenizer(&tokenizer);
        let mut codec = Self {
            tokenizer,
            fast,
            template,
            eos_token,
            eos_id,
            stop_ids,
            generation_prompt: String::new(),
            window_exact: false,
            turn_glue: String::new(),
            window_prompt_cache: std::sync::Mutex::new(None),
            last_turn: std::sync::Mutex::new(None),
            tool_parser: None,
        };
        // A template whose generation prompt cannot be probed still renders; only the
        // labelling of glue tokens (all mask 0) needs it.
        codec.generation_prompt = codec.probe_generation_prompt().unwrap_or_default();
        codec.window_exact = codec.probe_window_exact(&Kwargs::new());
        codec.turn_glue = codec.probe_turn_glue(&Kwargs::new()).unwrap_or_default();
        Ok(codec)
    }

    /// Sets the parser that turns sampled text into tool calls ([`Codec::append_sampled`]).
    pub fn with_tool_parser(mut self, format: ToolCallFormat) -> Self {
        self.tool_parser = Some(format);
        self
    }

    /// The tool-call parser in use, if any.
    pub fn tool_parser(&self) -> Option<ToolCallFormat> {
        self.tool_parser
    }

    /// The end-of-turn token (`eos_token` of `tokenizer_config.json`).
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// The id of [`Codec::eos_token`].
    pub fn eos_token_id(&self) -> u32 {
        self.eos_id
    }

    /// Ids that end a generation: the eos id first, then `generation_config.json`'s.
    pub fn stop_token_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The text the template appends for `add_generation_prompt` (e.g. `<|im_start|>assistant\n`).
    pub fn generation_prompt(&self) -> &str {
        &self.generation_prompt
    }

    /// Whether appends render a small window instead of the whole conversation (see
    /// [`TemplateProbe::window_exact`]).
    pub fn window_exact(&self) -> bool {
        self.window_exact
    }

    /// The chat template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    /// Whether [`Codec::encode`] uses the built-in encoder for Qwen2-style byte-level BPE
    /// tokenizers (same ids and offsets as `tokenizers`, several times cheaper) rather than
    /// [`Codec::tokenizer`]'s own pipeline.
    pub fn native_encoder(&self) -> bool {
        self.fast.is_some()
    }

    /// Tokenizes `text` without adding special tokens (`add_special_tokens=False`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match &self.fast {
            Some(fast) => Ok(fast.encode(text, None)),
            None => Ok(self.encoding(text)?.get_ids().to_vec()),
        }
    }

    /// [`Codec::encode`] with each token's byte range in `text`, as `tokenizers` reports it
    /// (a token holding part of a multi-byte character spans the whole character).
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Vec<Offsets>)> {
        if let Some(fast) = &self.fast {
            let mut offsets = Vec::with_capacity(text.len() / 3 + 1);
            let ids = fast.encode(text, Some(&mut offsets));
            return Ok((ids, offsets));
        }
        let enc = self.encoding(text)?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
    }

    fn encoding(&self, text: &str) -> Result<tokenizers::Encoding> {
        self.tokenizer
            .encode(text, false)
            .map_err(|e| Error::Codec {
                message: format!("tokenization failed: {e}"),
                source: None,
            })
    }

    /// Decodes ids to text; special tokens are kept unless `skip_special_tokens`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.tokenizer
            .decode(ids, skip_special_tokens)
            .map_err(|e| Error::Codec {
                message: format!("decoding failed: {e}"),
                source: None,
            })
    }

    /// Renders the chat template (`apply_chat_template(..., tokenize=False)`).
    pub fn render(&self, input: &ChatInput) -> Result<String> {
        self.template.render(input)
    }

    /// Renders and tokenizes (`apply_chat_template(..., tokenize=True)`).
    pub fn render_ids(&self, input: &ChatInput) -> Result<Vec<u32>> {
        self.encode(&self.render(input)?)
    }

    /// The generation prompt: the render of one empty user turn with and without
    /// `add_generation_prompt`; the longer must extend the shorter.
    fn probe_generation_prompt(&self) -> Result<String> {
        self.probe_generation_prompt_with(&Kwargs::new())
    }

    pub(crate) fn probe_generation_prompt_with(&self, kwargs: &Kwargs) -> Result<String> {
        let user = vec![serde_json::json!({"role": "user", "content": ""})];
        let base = ChatInput {
            messages: user,
            template_kwargs: kwargs.clone(),
            ..ChatInput::default()
        };
        let without = self.render(&base)?;
        let with = self.render(&ChatInput {
            add_generation_prompt: true,
            ..base
        })?;
        with.strip_prefix(without.as_str()).map(str::to_owned).ok_or_else(|| Error::Codec {
            message: "the generation prompt is not a suffix: rendering with add_generation_prompt changes earlier text"
                .into(),
            source: None,
        })
    }
}

/// Typed messages as the JSON a template sees: tool-call arguments held in memory as parsed
/// JSON are passed as objects (raw strings that never parsed stay strings).
pub fn messages_to_json(messages: &[Message]) -> Result<Vec<Value>> {
    messages
        .iter()
        .map(|m| {
            let mut v = serde_json::to_value(m)
                .map_err(|e| Error::invalid_input(format!("message is not serialisable: {e}")))?;
            if let Some(calls) = v.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (wire, call) in calls.iter_mut().zip(&m.tool_calls) {
                    if let Some(f) = wire.get_mut("function").and_then(Value::as_object_mut) {
                        f.insert("arguments".into(), call.function.arguments.clone());
                    }
                }
            }
            Ok(v)
        })
        .collect()
}

/// Tool specs as the JSON a template sees.
pub fn tools_to_json(tools: &[ToolSpec]) -> Result<Vec<Value>> {
    tools
        .iter()
        .map(|t| {
            serde_json::to_value(t)
                .map_err(|e| Error::invalid_input(format!("tool spec is not serialisable: {e}")))
        })
        .collect()
}

/// Byte offsets of a token in the encoded text: `(start, end)`.
pub type Offsets = (usize, usize);
pub(crate) type Globals = BTreeMap<String, Value>;
pub(crate) type Kwargs = Map<String, Value>;
