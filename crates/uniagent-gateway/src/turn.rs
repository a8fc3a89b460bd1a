//! The wire-independent request and answer of one completion: both the OpenAI and the
//! Anthropic routes translate to and from these.

use uniagent_core::{Message, SamplingParams, ToolSpec};

/// Whether and which tools the model may call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides (tool calls are parsed).
    #[default]
    Auto,
    /// Tool calls are not parsed: the text is returned as it was sampled.
    None,
    /// The client requires a call (not enforced on sampling: parsed as `Auto`).
    Required,
    /// The client names a function (not enforced on sampling: parsed as `Auto`).
    Function(String),
}

/// One completion request, after translation from the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRequest {
    /// The whole conversation as the client sends it.
    pub messages: Vec<Message>,
    /// Declared tools.
    pub tools: Vec<ToolSpec>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// Temperature, top-p, top-k, seed (the other fields are not read).
    pub sampling: SamplingParams,
    /// New-token cap of this request (`None`: the configured default).
    pub max_tokens: Option<usize>,
    /// Stop strings: the answer ends before the first one sampled.
    pub stop: Vec<String>,
}

impl TurnRequest {
    /// A request with default sampling and no tools.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            sampling: SamplingParams::default(),
            max_tokens: None,
            stop: Vec::new(),
        }
    }
}

/// How an answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn.
    Stop,
    /// The model called tools.
    ToolCalls,
    /// The token budget ran out.
    Length,
    /// A stop string was sampled (it is not part of the answer).
    StopSequence(String),
}

/// The answer to one [`TurnRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct TurnAnswer {
    /// The assistant message as returned to the client (tool-call ids unique in the session).
    pub message: Message,
    /// How it ended.
    pub finish: Finish,
    /// The sampled token ids (through the stop string when one ended it).
    pub token_ids: Vec<u32>,
    /// Per-token text of `token_ids`, for wire logprobs.
    pub token_texts: Vec<String>,
    /// The generator's logprobs, `None` when it gave none.
    pub logprobs: Option<Vec<f32>>,
    /// Tokens of the prompt the generator was given.
    pub prompt_tokens: usize,
    /// A malformed tool call: the answer carries the text as sampled instead.
    pub format_error: Option<String>,
    /// The chain (index in the session) the turn was recorded in.
    pub chain: usize,
}
