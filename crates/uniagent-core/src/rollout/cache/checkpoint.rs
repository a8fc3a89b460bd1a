//! Checkpoints: undoing appends without copying the cache (the gateway extends a chain in
//! place and rewinds it when the request fails, instead of working on a clone of a trace that
//! grows with every turn).

use super::RolloutCache;
use crate::{Error, LengthLimits, Result};

/// A point in a [`RolloutCache`]'s history: what [`RolloutCache::rewind`] returns to and
/// [`RolloutCache::prefix`] copies. Only appends are undone: in-place edits made after the
/// checkpoint (`mask_out_turn`, `mask_out`) stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheCheckpoint {
    pub(super) messages: usize,
    pub(super) response: usize,
    assistant_turns: u32,
    append_only: bool,
    logprobs_missing: bool,
    limits: LengthLimits,
}

impl RolloutCache {
    /// The cache's current point, for [`rewind`](Self::rewind) or [`prefix`](Self::prefix).
    ///
    /// ```
    /// use uniagent_core::{LengthLimits, Message, RolloutCache, TokenSource};
    ///
    /// let mut cache =
    ///     RolloutCache::with_tokens("r", vec![], vec![], vec![1, 2], LengthLimits::default())
    ///         .unwrap();
    /// cache.append_sampled(&[5, 6], &[-0.1, -0.2], Some(0)).unwrap();
    /// cache.push_message(Message::assistant("hi"));
    /// let before = cache.clone();
    /// let at = cache.checkpoint();
    /// cache.append_inserted(&[7, 8, 9], TokenSource::Observation).unwrap();
    /// cache.push_message(Message::user("more"));
    /// cache.rewind(at).unwrap();
    /// assert_eq!(cache, before);
    /// ```
    pub fn checkpoint(&self) -> CacheCheckpoint {
        CacheCheckpoint {
            messages: self.messages.len(),
            response: self.tokens.as_ref().map_or(0, |t| t.response_ids.len()),
            assistant_turns: self.assistant_turns,
            append_only: self.append_only,
            logprobs_missing: self.tokens.as_ref().is_some_and(|t| t.logprobs_missing),
            limits: self.limits,
        }
    }

    /// Returns the cache to `at`, dropping what was appended since. Fails, leaving the cache
    /// unchanged, when `at` is not a point of this cache's history (it is longer than the
    /// cache now).
    pub fn rewind(&mut self, at: CacheCheckpoint) -> Result<()> {
        self.check_prefix(&at)?;
        self.messages.truncate(at.messages);
        if let Some(t) = &mut self.tokens {
            t.response_ids.truncate(at.response);
            t.response_mask.truncate(at.response);
            t.response_logprobs.truncate(at.response);
            t.provenance.truncate(at.response);
            t.logprobs_missing = at.logprobs_missing;
        }
        self.assistant_turns = at.assistant_turns;
        self.append_only = at.append_only;
        self.limits = at.limits;
        Ok(())
    }

    /// A copy of the cache as it was at `at`, copying only that prefix (what a rollback to an
    /// earlier turn needs, without cloning the whole trace first).
    pub fn prefix(&self, at: CacheCheckpoint) -> Result<RolloutCache> {
        self.check_prefix(&at)?;
        let tokens = self.tokens.as_ref().map(|t| super::TokenTrace {
            prompt_ids: t.prompt_ids.clone(),
            response_ids: t.response_ids[..at.response].to_vec(),
            response_mask: t.response_mask[..at.response].to_vec(),
            response_logprobs: t.response_logprobs[..at.response].to_vec(),
            provenance: t.provenance[..at.response].to_vec(),
            logprobs_missing: at.logprobs_missing,
        });
        Ok(RolloutCache {
            id: self.id.clone(),
            messages: self.messages[..at.messages].to_vec(),
            tools: self.tools.clone(),
            tokens,
            limits: at.limits,
            assistant_turns: at.assistant_turns,
            template_kwargs: self.template_kwargs.clone(),
            append_only: at.append_only,
        })
    }

    pub(super) fn check_prefix(&self, at: &CacheCheckpoint) -> Result<()> {
        let response = self.tokens.as_ref().map_or(0, |t| t.response_ids.len());
        if at.messages > self.messages.len()
            || at.response > response
            || at.assistant_turns > self.assistant_turns
        {
            return Err(Error::invalid_input(format!(
                "rollout `{}`: checkpoint ({} messages, {} response tokens) is not in this \
                 cache's history ({} messages, {} response tokens)",
                self.id,
                at.messages,
                at.response,
                self.messages.len(),
                response
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, TokenSource};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Sampled(Vec<u32>, bool),
        Inserted(Vec<u32>),
        User(String),
        Assistant(String),
        NotAppendOnly,
        Restrict(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let ids = || proptest::collection::vec(0u32..1000, 0..6);
        prop_oneof![
            (ids(), any::<bool>()).prop_map(|(i, m)| Op::Sampled(i, m)),
            ids().prop_map(Op::Inserted),
            "[a-z]{0,5}".prop_map(Op::User),
            "[a-z]{0,5}".prop_map(Op::Assistant),
            Just(Op::NotAppendOnly),
            (100usize..400).prop_map(Op::Restrict),
        ]
    }

    fn apply(cache: &mut RolloutCache, op: &Op) {
        // Appends past a limit fail and change nothing: either way the cache stays valid.
        let _ = match op {
            Op::Sampled(ids, missing) => {
                let lps = vec![-0.25; ids.len()];
                let r = cache.append_sampled(ids, &lps, Some(1));
                if *missing {
                    cache.mark_logprobs_missing();
                }
                r
            }
            Op::Inserted(ids) => cache.append_inserted(ids, TokenSource::Observation),
            Op::User(s) => {
                cache.push_message(Message::user(s.clone()));
                Ok(())
            }
            Op::Assistant(s) => {
                cache.push_message(Message::assistant(s.clone()));
                Ok(())
            }
            Op::NotAppendOnly => {
                cache.mark_not_append_only();
                Ok(())
            }
            Op::Restrict(n) => cache.restrict_limits(LengthLimits {
                max_response_len: Some(*n),
                ..LengthLimits::default()
            }),
        };
    }

    fn fresh() -> RolloutCache {
        RolloutCache::with_tokens(
            "p",
            vec![Message::user("q")],
            vec![],
            vec![1, 2, 3],
            LengthLimits::default(),
        )
        .unwrap()
    }

    proptest! {
        /// Whatever is appended after a checkpoint, rewinding to it gives back the cache as
        /// it was, and `prefix` the same without touching the cache.
        #[test]
        fn rewind_and_prefix_return_the_checkpointed_state(
            before in proptest::collection::vec(op(), 0..12),
            after in proptest::collection::vec(op(), 0..12),
        ) {
            let mut cache = fresh();
            for o in &before {
                apply(&mut cache, o);
            }
            let then = cache.clone();
            let at = cache.checkpoint();
            for o in &after {
                apply(&mut cache, o);
            }
            let now = cache.clone();
            prop_assert_eq!(&cache.prefix(at).unwrap(), &then);
            prop_assert_eq!(&cache, &now);
            cache.rewind(at).unwrap();
            prop_assert_eq!(&cache, &then);
            cache.check_invariants().unwrap();
        }
    }

    #[test]
    fn a_checkpoint_from_a_longer_history_is_refused() {
        let mut cache = fresh();
        cache
            .append_inserted(&[4, 5], TokenSource::Observation)
            .unwrap();
        let later = cache.checkpoint();
        let mut short = fresh();
        let unchanged = short.clone();
        assert!(short.rewind(later).is_err());
        assert!(short.prefix(later).is_err());
        assert_eq!(short, unchanged);
    }
}
