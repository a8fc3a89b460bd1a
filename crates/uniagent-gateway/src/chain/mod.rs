//! Token chains: the linear token histories a session's requests grow.
//!
//! A chain holds the exact tokens the policy saw and sampled ([`RolloutCache`]), the messages
//! as the client sees them (for prefix matching), and enough to rebuild the state before its
//! last sampled turn (for rollback). Chains are never corrupted: a request that does not
//! extend one starts another.

mod extend;
pub mod matching;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use uniagent_core::agent::{ExitReason, Trajectory};
use uniagent_core::codec::Codec;
use uniagent_core::{
    CacheCheckpoint, LengthLimits, Message, RewardOutcome, RolloutCache, ToolSpec,
};

pub(crate) use extend::{extend, ExtendError};

/// Why a chain was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainOrigin {
    /// The session's first request.
    First,
    /// The request rewrote history before the last assistant turn of every chain.
    HistoryRewritten,
    /// The request declared a different tool list.
    ToolsChanged,
    /// Appending to the chain would not be append-only under the chat template (e.g. Qwen3
    /// dropping earlier reasoning): the new chain starts from the template's full render.
    NotAppendOnly,
    /// The messages could not be appended incrementally (e.g. two user messages in a row
    /// after a rollback).
    NotExtensible,
}

/// How to rebuild the state before a chain's last sampled turn.
#[derive(Debug, Clone)]
pub(crate) enum Base {
    /// A fresh start from these messages.
    Start(Vec<Message>),
    /// The chain's own state at this point (right after a sampled turn) plus these appended
    /// messages.
    After(CacheCheckpoint, Vec<Message>),
}

/// One recorded format error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormatError {
    /// Index of the assistant turn in the chain (0-based).
    pub turn: u32,
    /// The parser's message.
    pub message: String,
}

/// One token chain of a session.
#[derive(Debug, Clone)]
pub struct Chain {
    pub(crate) cache: RolloutCache,
    pub(crate) client: Vec<Message>,
    pub(crate) tools: Vec<ToolSpec>,
    /// The state before the last sampled turn, for rollback.
    pub(crate) base: Base,
    pub(crate) origin: ChainOrigin,
    pub(crate) format_errors: Vec<FormatError>,
    pub(crate) rollbacks: u32,
    pub(crate) limit: Option<ExitReason>,
    pub(crate) sampled_tokens: u64,
    pub(crate) model_seconds: f64,
}

/// What one sampled turn adds to its chain's bookkeeping (journaled with the turn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_error: Option<FormatError>,
    /// The length limit the turn ran into, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<ExitReason>,
    pub sampled_tokens: u64,
    pub model_seconds: f64,
}

impl Chain {
    /// A chain started by a turn: `cache` ends with it, `client` is the conversation with it.
    pub(crate) fn new(
        cache: RolloutCache,
        client: Vec<Message>,
        base: Base,
        tools: Vec<ToolSpec>,
        origin: ChainOrigin,
        turn: TurnRecord,
    ) -> Self {
        Self {
            cache,
            client,
            base,
            tools,
            origin,
            format_errors: turn.format_error.into_iter().collect(),
            rollbacks: 0,
            limit: turn.limit,
            sampled_tokens: turn.sampled_tokens,
            model_seconds: turn.model_seconds,
        }
    }

    /// Moves the chain on by a new turn: its cache already holds it (extended in place), or
    /// `replaced` does (a rollback). `base` rebuilds the state before that turn. A rollback
    /// replaces the last turn, whose format error goes with it.
    pub(crate) fn advance(
        &mut self,
        replaced: Option<RolloutCache>,
        base: Base,
        client: Vec<Message>,
        turn: TurnRecord,
    ) {
        if let Some(cache) = replaced {
            self.rollbacks += 1;
            let last = self.cache.assistant_turns().saturating_sub(1);
            self.format_errors.retain(|e| e.turn < last);
            self.cache = cache;
        }
        self.base = base;
        self.client = client;
        self.format_errors.extend(turn.format_error);
        self.limit = turn.limit.or(self.limit);
        self.sampled_tokens += turn.sampled_tokens;
        self.model_seconds += turn.model_seconds;
    }

    /// The exact token state.
    pub fn cache(&self) -> &RolloutCache {
        &self.cache
    }

    /// The conversation as the client sees it (sampled turns as returned).
    pub fn messages(&self) -> &[Message] {
        &self.client
    }

    /// The tools the chain was started with.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// Why the chain was started.
    pub fn origin(&self) -> ChainOrigin {
        self.origin
    }

    /// How many times a request rolled the chain's last turn back.
    pub fn rollbacks(&self) -> u32 {
        self.rollbacks
    }

    /// The state before the last sampled turn, rebuilt from [`Base`]; its client messages
    /// are `messages()` without the last.
    pub(crate) fn rolled_back(
        &self,
        codec: &Codec,
        id: &str,
        limits: LengthLimits,
    ) -> Result<RolloutCache, ExtendError> {
        match &self.base {
            Base::Start(messages) => Ok(codec.start(
                id,
                messages.clone(),
                self.tools.clone(),
                self.cache.template_kwargs().clone(),
                limits,
            )?),
            Base::After(at, appended) => {
                let mut cache = self.cache.prefix(*at)?;
                extend(codec, &mut cache, appended)?;
                Ok(cache)
            }
        }
    }

    /// The chain as one `trajectories.jsonl` object: the token record, the client's
    /// conversation, the session's reward, and the gateway's facts under
    /// `extra_fields.gateway`. `response_logprobs` is absent when the generator gave none.
    /// When the chain is not append-only, `codec`'s full render of its messages is recorded
    /// as `rerender_ids`.
    pub fn trajectory(
        &self,
        codec: &Codec,
        session: &str,
        index: u32,
        reward: Option<&RewardOutcome>,
    ) -> Value {
        let mut output = self.cache.to_agent_loop_output();
        // For inspection only: a failed render leaves the record without it.
        output.rerender_ids = codec.rerender_ids(&self.cache).unwrap_or_else(|e| {
            tracing::warn!(
                session,
                chain = index,
                "full re-render for the record failed: {e}"
            );
            None
        });
        output.reward_score = reward.map(|r| r.score);
        let turns = self.cache.assistant_turns();
        let mut t = Trajectory {
            id: format!("{session}:{index}"),
            task_id: session.to_owned(),
            sample: index,
            exit_reason: ExitReason::Finished,
            masked: false,
            error: None,
            reward: reward.cloned(),
            signal: None,
            counts: Default::default(),
            timings: Default::default(),
            output,
            messages: self.client.clone(),
        };
        t.counts.turns = turns;
        t.counts.format_errors = self.format_errors.len() as u32;
        t.counts.sampled_tokens = self.sampled_tokens;
        t.timings.model = self.model_seconds;
        t.timings.total = self.model_seconds;
        let nothing_sampled = self.sampled_tokens == 0;
        t.set_exit(self.limit.unwrap_or(ExitReason::Finished), nothing_sampled);
        let mut gateway = Map::new();
        gateway.insert("session".into(), session.into());
        gateway.insert("chain".into(), index.into());
        gateway.insert("origin".into(), json!(self.origin));
        gateway.insert("rollbacks".into(), self.rollbacks.into());
        gateway.insert("append_only".into(), self.cache.append_only().into());
        gateway.insert("format_errors".into(), json!(self.format_errors));
        t.output
            .extra_fields
            .insert("gateway".into(), Value::Object(gateway));
        Value::Object(uniagent_core::formats::trajectories::record(&t))
    }
}
