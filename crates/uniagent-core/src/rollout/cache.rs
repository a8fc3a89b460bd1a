//! [`RolloutCache`]: prompt ids, response ids, mask, logprobs and provenance of one trajectory.

use serde::{Deserialize, Serialize};

use crate::error::{Error, LengthLimitKind, Result};
use crate::message::{Message, ToolSpec};

mod checkpoint;
mod delta;

pub use checkpoint::CacheCheckpoint;
pub use delta::CacheDelta;

/// Where a response token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// Part of the initial prompt.
    Prompt,
    /// Sampled by the policy (mask 1).
    Sampled,
    /// Inserted by the chat template between messages (end-of-turn glue, generation prompt).
    TemplateGlue,
    /// A tool result or user message inserted by the environment.
    Observation,
}

/// Provenance of one response token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Index of the assistant turn this token belongs to or follows (0-based).
    pub turn: u32,
    /// Where it came from.
    pub source: TokenSource,
    /// Weight version of the policy that sampled it (sampled tokens only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<u64>,
}

/// Token limits of a trajectory. `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LengthLimits {
    /// Maximum tokens of the initial prompt.
    pub max_prompt_len: Option<usize>,
    /// Maximum tokens after the prompt (sampled and inserted together).
    pub max_response_len: Option<usize>,
    /// Maximum prompt + response tokens (the context window).
    pub max_model_len: Option<usize>,
}

/// The token trace of a trajectory, kept by token-level backends.
///
/// Invariants (checked on every mutation): `response_ids`, `response_mask`,
/// `response_logprobs` and `provenance` have equal lengths; mask is 1 exactly where the source
/// is [`TokenSource::Sampled`]; logprobs are `0.0` where mask is 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TokenTrace {
    /// Initial prompt ids.
    pub prompt_ids: Vec<u32>,
    /// Everything after the prompt.
    pub response_ids: Vec<u32>,
    /// 1 = sampled by the policy, 0 = inserted.
    pub response_mask: Vec<u8>,
    /// Engine log-probability per response token; 0.0 where mask is 0.
    pub response_logprobs: Vec<f32>,
    /// Turn, source and weight version per response token.
    pub provenance: Vec<Provenance>,
    /// Some sampled tokens came without logprobs (the backend gave none): their entries in
    /// `response_logprobs` are placeholders, and the output carries no logprobs at all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub logprobs_missing: bool,
}

impl TokenTrace {
    /// Prompt plus response tokens: the model's current context.
    pub fn len(&self) -> usize {
        self.prompt_ids.len() + self.response_ids.len()
    }

    /// Whether there are no tokens at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The full context, prompt then response.
    pub fn all_ids(&self) -> Vec<u32> {
        let mut ids = Vec::with_capacity(self.len());
        ids.extend_from_slice(&self.prompt_ids);
        ids.extend_from_slice(&self.response_ids);
        ids
    }
}

/// The state of one trajectory: its messages and, for token-level backends, its exact tokens.
///
/// ```
/// use uniagent_core::{LengthLimits, Message, RolloutCache, TokenSource};
///
/// let limits = LengthLimits { max_model_len: Some(16), ..LengthLimits::default() };
/// let mut cache = RolloutCache::with_tokens("t", vec![Message::user("hi")], vec![], vec![1, 2, 3], limits).unwrap();
/// assert_eq!(cache.generation_budget(None).unwrap(), 13);
/// cache.append_sampled(&[7, 8], &[-0.5, -0.25], Some(3)).unwrap();
/// cache.append_inserted(&[9], TokenSource::TemplateGlue).unwrap();
/// let trace = cache.tokens().unwrap();
/// assert_eq!(trace.response_mask, vec![1, 1, 0]);
/// assert_eq!(trace.response_logprobs, vec![-0.5, -0.25, 0.0]);
/// // Provenance reaches the trainer: one weight version per response token, null on mask 0.
/// let out = cache.to_agent_loop_output();
/// assert_eq!(out.weight_versions, Some(vec![Some(3), Some(3), None]));
/// // ... and where each token came from, run-length encoded over prompt and response.
/// assert_eq!(serde_json::to_string(&out.token_sources).unwrap(),
///            r#"[["prompt",3],["sampled",2],["template",1]]"#);
/// cache.mask_out_turn(0);
/// assert_eq!(cache.to_agent_loop_output().weight_versions, Some(vec![None, None, None]));
/// // Sampled ids must come with as many logprobs.
/// assert!(cache.append_sampled(&[1, 2], &[-0.1], None).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutCache {
    id: String,
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
    tokens: Option<TokenTrace>,
    limits: LengthLimits,
    assistant_turns: u32,
    /// Extra chat-template variables (`enable_thinking`, ...) the codec renders with.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Whether the token stream still equals a full render of the messages (see
    /// [`RolloutCache::append_only`]).
    #[serde(default = "yes")]
    append_only: bool,
}

fn yes() -> bool {
    true
}

impl RolloutCache {
    /// A message-only cache (API-level backends).
    pub fn messages_only(
        id: impl Into<String>,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
    ) -> Self {
        Self {
            id: id.into(),
            messages,
            tools,
            tokens: None,
            limits: LengthLimits::default(),
            assistant_turns: 0,
            template_kwargs: serde_json::Map::new(),
            append_only: true,
        }
    }

    /// A token-level cache. Fails with [`Error::LengthLimit`] if the prompt is longer than
    /// `max_prompt_len` or `max_model_len`; the prompt is never truncated.
    pub fn with_tokens(
        id: impl Into<String>,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
        prompt_ids: Vec<u32>,
        limits: LengthLimits,
    ) -> Result<Self> {
        for (limit, allowed) in [
            (LengthLimitKind::MaxPromptLen, limits.max_prompt_len),
            (LengthLimitKind::MaxModelLen, limits.max_model_len),
        ] {
            if let Some(allowed) = allowed {
                if prompt_ids.len() > allowed {
                    return Err(Error::LengthLimit {
                        limit,
                        needed: prompt_ids.len(),
                        allowed,
                    });
                }
            }
        }
        Ok(Self {
            id: id.into(),
            messages,
            tools,
            tokens: Some(TokenTrace {
                prompt_ids,
                ..TokenTrace::default()
            }),
            limits,
            assistant_turns: 0,
            template_kwargs: serde_json::Map::new(),
            append_only: true,
        })
    }

    /// Trajectory id (also the sticky-routing key for inference servers).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The conversation so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The tools offered to the model.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The token trace, for token-level backends.
    pub fn tokens(&self) -> Option<&TokenTrace> {
        self.tokens.as_ref()
    }

    /// The length limits.
    pub fn limits(&self) -> LengthLimits {
        self.limits
    }

    /// Extra chat-template variables used by the codec for this trajectory.
    pub fn template_kwargs(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.template_kwargs
    }

    /// Sets the extra chat-template variables (done once by the codec's `start`).
    pub fn set_template_kwargs(&mut self, kwargs: serde_json::Map<String, serde_json::Value>) {
        self.template_kwargs = kwargs;
    }

    /// `true` while the token stream equals what the chat template renders for the messages
    /// (the template is append-only for this conversation). `false` once an append showed
    /// that the template rewrites earlier turns (e.g. Qwen3 dropping past reasoning): the
    /// sampled tokens are kept regardless, so the stream then differs from a fresh render.
    pub fn append_only(&self) -> bool {
        self.append_only
    }

    /// Records that the stream no longer equals a full render (sticky).
    pub fn mark_not_append_only(&mut self) {
        self.append_only = false;
    }

    /// Fails with [`Error::LengthLimit`] if `extra` more response tokens would not fit.
    pub fn check_room_for(&self, extra: usize) -> Result<()> {
        self.check_room(extra)
    }

    /// Assistant turns appended so far.
    pub fn assistant_turns(&self) -> u32 {
        self.assistant_turns
    }

    /// Reserves room for at least `tokens` more response tokens and `messages` more messages,
    /// so that appends up to that size never reallocate (and copy) the whole trace.
    ///
    /// ```
    /// use uniagent_core::{LengthLimits, RolloutCache};
    ///
    /// let mut cache =
    ///     RolloutCache::with_tokens("r", vec![], vec![], vec![1, 2, 3], LengthLimits::default()).unwrap();
    /// cache.reserve(4096, 16);
    /// assert!(cache.tokens().unwrap().response_ids.capacity() >= 4096);
    /// ```
    pub fn reserve(&mut self, tokens: usize, messages: usize) {
        self.messages.reserve(messages);
        if let Some(t) = &mut self.tokens {
            t.response_ids.reserve(tokens);
            t.response_mask.reserve(tokens);
            t.response_logprobs.reserve(tokens);
            t.provenance.reserve(tokens);
        }
    }

    /// Appends a message. An assistant message counts as a new turn.
    pub fn push_message(&mut self, message: Message) {
        if message.role == crate::Role::Assistant {
            self.assistant_turns += 1;
        }
        self.messages.push(message);
    }

    /// How many tokens the next generation may produce: the tighter of the response and model
    /// limits, further capped by `requested`. Fails with [`Error::LengthLimit`] when not even one
    /// token fits — checked **before** the model is called.
    pub fn generation_budget(&self, requested: Option<usize>) -> Result<usize> {
        let (prompt, response) = match &self.tokens {
            Some(t) => (t.prompt_ids.len(), t.response_ids.len()),
            None => (0, 0),
        };
        let mut budget = requested.unwrap_or(usize::MAX);
        let mut binding = None;
        if let Some(max) = self.limits.max_response_len {
            let left = max.saturating_sub(response);
            if left <= budget {
                budget = left;
                binding = Some((LengthLimitKind::MaxResponseLen, response + 1, max));
            }
        }
        if let Some(max) = self.limits.max_model_len {
            let left = max.saturating_sub(prompt + response);
            if left <= budget {
                budget = left;
                binding = Some((LengthLimitKind::MaxModelLen, prompt + response + 1, max));
            }
        }
        if budget == 0 {
            let (limit, needed, allowed) =
                binding.unwrap_or((LengthLimitKind::MaxResponseLen, 1, 0));
            return Err(Error::LengthLimit {
                limit,
                needed,
                allowed,
            });
        }
        Ok(budget)
    }

    fn trace_mut(&mut self) -> Result<&mut TokenTrace> {
        self.tokens.as_mut().ok_or_else(|| {
            Error::invalid_input(format!("rollout `{}` has no token trace", self.id))
        })
    }

    fn check_room(&self, extra: usize) -> Result<()> {
        let Some(t) = &self.tokens else { return Ok(()) };
        if let Some(max) = self.limits.max_response_len {
            let needed = t.response_ids.len() + extra;
            if needed > max {
                return Err(Error::LengthLimit {
                    limit: LengthLimitKind::MaxResponseLen,
                    needed,
                    allowed: max,
                });
            }
        }
        if let Some(max) = self.limits.max_model_len {
            let needed = t.len() + extra;
            if needed > max {
                return Err(Error::LengthLimit {
                    limit: LengthLimitKind::MaxModelLen,
                    needed,
                    allowed: max,
                });
            }
        }
        Ok(())
    }

    /// Appends tokens sampled by the policy (mask 1) with their logprobs. The turn index is the
    /// number of assistant messages pushed so far (push the message after its tokens).
    pub fn append_sampled(
        &mut self,
        ids: &[u32],
        logprobs: &[f32],
        weight_version: Option<u64>,
    ) -> Result<()> {
        if ids.len() != logprobs.len() {
            return Err(Error::invalid_input(format!(
                "sampled tokens need one logprob each: {} ids, {} logprobs",
                ids.len(),
                logprobs.len()
            )));
        }
        if let Some(bad) = logprobs.iter().find(|lp| !lp.is_finite() || **lp > 0.0) {
            return Err(Error::invalid_input(format!(
                "logprob {bad} is not a finite value <= 0"
            )));
        }
        self.check_room(ids.len())?;
        let turn = self.assistant_turns;
        let t = self.trace_mut()?;
        t.response_ids.extend_from_slice(ids);
        t.response_mask.extend(std::iter::repeat_n(1u8, ids.len()));
        t.response_logprobs.extend_from_slice(logprobs);
        t.provenance.extend(std::iter::repeat_n(
            Provenance {
                turn,
                source: TokenSource::Sampled,
                weight_version,
            },
            ids.len(),
        ));
        Ok(())
    }

    /// Records that some sampled tokens came without logprobs (the backend reported none;
    /// append them with placeholder values): the trajectory's `response_logprobs` becomes
    /// absent (`None`) rather than holding made-up values that a trainer would mistake for the
    /// behaviour policy. A no-op on a message-level cache.
    ///
    /// ```
    /// use uniagent_core::{LengthLimits, RolloutCache};
    /// let mut cache =
    ///     RolloutCache::with_tokens("s", vec![], vec![], vec![1, 2], LengthLimits::default()).unwrap();
    /// cache.append_sampled(&[5], &[-0.5], Some(0)).unwrap();
    /// cache.append_sampled(&[7, 8], &[0.0, 0.0], Some(0)).unwrap();
    /// cache.mark_logprobs_missing();
    /// let out = cache.to_agent_loop_output();
    /// assert_eq!(out.response_mask, vec![1, 1, 1]);
    /// assert_eq!(out.response_logprobs, None);
    /// ```
    pub fn mark_logprobs_missing(&mut self) {
        if let Some(t) = self.tokens.as_mut() {
            t.logprobs_missing = true;
        }
    }

    /// Appends tokens the policy did not sample (mask 0, logprob 0.0). Fails with
    /// [`Error::LengthLimit`] when they do not fit, leaving the cache unchanged.
    pub fn append_inserted(&mut self, ids: &[u32], source: TokenSource) -> Result<()> {
        if source == TokenSource::Sampled || source == TokenSource::Prompt {
            return Err(Error::invalid_input(format!(
                "append_inserted takes template glue or observation tokens, not {source:?}"
            )));
        }
        self.check_room(ids.len())?;
        let turn = self.assistant_turns.saturating_sub(1);
        let t = self.trace_mut()?;
        t.response_ids.extend_from_slice(ids);
        t.response_mask.extend(std::iter::repeat_n(0u8, ids.len()));
        t.response_logprobs
            .extend(std::iter::repeat_n(0.0f32, ids.len()));
        t.provenance.extend(std::iter::repeat_n(
            Provenance {
                turn,
                source,
                weight_version: None,
            },
            ids.len(),
        ));
        Ok(())
    }

    /// Tightens the length limits to the stricter of the current and `limits` (a `None` in
    /// `limits` keeps the current value). Fails with [`Error::LengthLimit`] when the prompt
    /// does not fit the new limits; the limits are changed either way.
    pub fn restrict_limits(&mut self, limits: LengthLimits) -> Result<()> {
        fn tighter(a: Option<usize>, b: Option<usize>) -> Option<usize> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        self.limits = LengthLimits {
            max_prompt_len: tighter(self.limits.max_prompt_len, limits.max_prompt_len),
            max_response_len: tighter(self.limits.max_response_len, limits.max_response_len),
            max_model_len: tighter(self.limits.max_model_len, limits.max_model_len),
        };
        let Some(t) = &self.tokens else { return Ok(()) };
        for (limit, allowed) in [
            (LengthLimitKind::MaxPromptLen, self.limits.max_prompt_len),
            (LengthLimitKind::MaxModelLen, self.limits.max_model_len),
        ] {
            if let Some(allowed) = allowed {
                if t.prompt_ids.len() > allowed {
                    return Err(Error::LengthLimit {
                        limit,
                        needed: t.prompt_ids.len(),
                        allowed,
                    });
                }
            }
        }
        self.check_room(0)
    }

    /// Sets the mask of the tokens sampled in assistant turn `turn` (0-based) to 0 and their
    /// logprobs to 0.0, keeping the tokens: a turn excluded from training (e.g. one cut by the
    /// token budget). Returns how many tokens were masked.
    pub fn mask_out_turn(&mut self, turn: u32) -> usize {
        let Some(t) = &mut self.tokens else { return 0 };
        let mut n = 0;
        for ((m, lp), p) in t
            .response_mask
            .iter_mut()
            .zip(&mut t.response_logprobs)
            .zip(&t.provenance)
        {
            if p.turn == turn && p.source == TokenSource::Sampled && *m == 1 {
                *m = 0;
                *lp = 0.0;
                n += 1;
            }
        }
        n
    }

    /// Sets every mask entry to 0 (a trajectory excluded from training), keeping the tokens.
    pub fn mask_out(&mut self) {
        if let Some(t) = &mut self.tokens {
            t.response_mask.iter_mut().for_each(|m| *m = 0);
            t.response_logprobs.iter_mut().for_each(|lp| *lp = 0.0);
        }
    }

    /// Checks the trace invariants; used by tests and debug assertions.
    pub fn check_invariants(&self) -> Result<()> {
        let Some(t) = &self.tokens else { return Ok(()) };
        let n = t.response_ids.len();
        if t.response_mask.len() != n || t.response_logprobs.len() != n || t.provenance.len() != n {
            return Err(Error::internal(format!(
                "trace lengths differ: ids {n}, mask {}, logprobs {}, provenance {}",
                t.response_mask.len(),
                t.response_logprobs.len(),
                t.provenance.len()
            )));
        }
        for (i, ((&m, &lp), p)) in t
            .response_mask
            .iter()
            .zip(&t.response_logprobs)
            .zip(&t.provenance)
            .enumerate()
        {
            if m == 0 && lp != 0.0 {
                return Err(Error::internal(format!(
                    "token {i} has mask 0 but logprob {lp}"
                )));
            }
            if m == 1 && p.source != TokenSource::Sampled {
                return Err(Error::internal(format!(
                    "token {i} has mask 1 but source {:?}",
                    p.source
                )));
            }
            if m > 1 {
                return Err(Error::internal(format!("token {i} has mask {m}")));
            }
        }
        self.check_room(0)
    }

    /// Converts into verl's `AgentLoopOutput` (token fields empty for message-only caches).
    pub fn to_agent_loop_output(&self) -> super::AgentLoopOutput {
        let t = self.tokens.clone().unwrap_or_default();
        // Masked-out tokens carry no version: nothing is trained on them.
        let versions: Vec<Option<u64>> = t
            .provenance
            .iter()
            .zip(&t.response_mask)
            .map(|(p, &m)| if m == 0 { None } else { p.weight_version })
            .collect();
        let user_turns = self
            .messages
            .iter()
            .filter(|m| m.role == crate::Role::User)
            .count() as u32;
        super::AgentLoopOutput {
            prompt_ids: t.prompt_ids,
            response_ids: t.response_ids,
            response_mask: t.response_mask,
            response_logprobs: (self.tokens.is_some() && !t.logprobs_missing)
                .then_some(t.response_logprobs),
            weight_versions: self.tokens.as_ref().map(|_| versions),
            reward_score: None,
            num_turns: user_turns + self.assistant_turns + 1,
            metrics: super::AgentLoopMetrics::default(),
            extra_fields: serde_json::Map::new(),
            token_sources: self.token_sources(),
            rerender_ids: None,
        }
    }

    /// Where every token of the prompt and the response came from, run-length encoded
    /// (`None` for message-only caches).
    pub fn token_sources(&self) -> Option<super::TokenSourceRuns> {
        let t = self.tokens.as_ref()?;
        Some(super::TokenSourceRuns::encode(
            std::iter::repeat_n(TokenSource::Prompt, t.prompt_ids.len())
                .chain(t.provenance.iter().map(|p| p.source)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cache(prompt: usize, limits: LengthLimits) -> RolloutCache {
        RolloutCache::with_tokens("t", vec![], vec![], (0..prompt as u32).collect(), limits)
            .unwrap()
    }

    #[test]
    fn over_long_prompt_is_an_error_not_a_truncation() {
        let limits = LengthLimits {
            max_prompt_len: Some(4),
            ..Default::default()
        };
        let err = RolloutCache::with_tokens("t", vec![], vec![], vec![0; 5], limits).unwrap_err();
        assert!(matches!(
            err,
            Error::LengthLimit {
                limit: LengthLimitKind::MaxPromptLen,
                needed: 5,
                allowed: 4
            }
        ));
    }

    #[test]
    fn budget_is_checked_before_generation() {
        let limits = LengthLimits {
            max_model_len: Some(5),
            max_response_len: Some(10),
            ..Default::default()
        };
        let mut c = cache(3, limits);
        assert_eq!(c.generation_budget(Some(100)).unwrap(), 2);
        c.append_sampled(&[1, 2], &[-1.0, -1.0], None).unwrap();
        let err = c.generation_budget(None).unwrap_err();
        assert!(matches!(
            err,
            Error::LengthLimit {
                limit: LengthLimitKind::MaxModelLen,
                ..
            }
        ));
    }

    #[test]
    fn overflowing_observation_leaves_cache_unchanged() {
        let limits = LengthLimits {
            max_response_len: Some(3),
            ..Default::default()
        };
        let mut c = cache(1, limits);
        c.append_sampled(&[5], &[-0.1], None).unwrap();
        let before = c.clone();
        assert!(c
            .append_inserted(&[1, 2, 3], TokenSource::Observation)
            .is_err());
        assert_eq!(c, before);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Sampled(Vec<u32>, Vec<f32>),
        Inserted(Vec<u32>, bool),
        Assistant,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                proptest::collection::vec(0u32..1000, 0..8),
                proptest::collection::vec(-20.0f32..=0.0, 0..8)
            )
                .prop_map(|(ids, lps)| Op::Sampled(ids, lps)),
            (proptest::collection::vec(0u32..1000, 0..8), any::<bool>())
                .prop_map(|(ids, glue)| Op::Inserted(ids, glue)),
            Just(Op::Assistant),
        ]
    }

    proptest! {
        #[test]
        fn invariants_hold_after_any_sequence(
            prompt in 0usize..20,
            max_resp in proptest::option::of(0usize..40),
            max_model in proptest::option::of(0usize..60),
            ops in proptest::collection::vec(op(), 0..30),
        ) {
            let limits = LengthLimits { max_prompt_len: None, max_response_len: max_resp, max_model_len: max_model };
            let Ok(mut c) = RolloutCache::with_tokens("p", vec![], vec![], vec![0; prompt], limits) else {
                prop_assert!(max_model.is_some_and(|m| prompt > m));
                return Ok(());
            };
            let mut sampled = Vec::new();
            for op in ops {
                let before = c.clone();
                let res = match op {
                    Op::Sampled(ids, lps) => {
                        let r = c.append_sampled(&ids, &lps, Some(1));
                        if r.is_ok() { sampled.extend(ids); }
                        r
                    }
                    Op::Inserted(ids, glue) => c.append_inserted(
                        &ids, if glue { TokenSource::TemplateGlue } else { TokenSource::Observation }),
                    Op::Assistant => { c.push_message(Message::assistant("x")); Ok(()) }
                };
                if res.is_err() { prop_assert_eq!(&c, &before); }
                prop_assert!(c.check_invariants().is_ok());
            }
            let t = c.tokens().unwrap();
            let masked: Vec<u32> = t.response_ids.iter().zip(&t.response_mask)
                .filter(|(_, m)| **m == 1).map(|(id, _)| *id).collect();
            prop_assert_eq!(masked, sampled);
        }
    }
}
