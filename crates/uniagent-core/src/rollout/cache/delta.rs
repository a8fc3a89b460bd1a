//! [`CacheDelta`]: what a cache gained since a checkpoint, to persist a growing trace turn by
//! turn (the gateway's journal of open sessions) without writing the whole trace each time.

use serde::{Deserialize, Serialize};

use super::{CacheCheckpoint, Provenance, RolloutCache, TokenSource};
use crate::{Error, LengthLimits, Message, Result};

/// The change of a [`RolloutCache`] since a [`CacheCheckpoint`]: the messages and response
/// tokens appended after it, and the cache's small state after them. Applied to a cache that
/// is, or extends, the state at the checkpoint, [`RolloutCache::apply_delta`] gives back the
/// cache the delta was taken from.
///
/// ```
/// use uniagent_core::{LengthLimits, Message, RolloutCache, TokenSource};
///
/// let mut cache =
///     RolloutCache::with_tokens("r", vec![Message::user("q")], vec![], vec![1, 2], LengthLimits::default())
///         .unwrap();
/// cache.append_sampled(&[5, 6], &[-0.5, -0.25], Some(3)).unwrap();
/// cache.push_message(Message::assistant("a"));
/// let mut copy = cache.clone();
/// let at = cache.checkpoint();
/// cache.append_inserted(&[7], TokenSource::Observation).unwrap();
/// cache.push_message(Message::user("more"));
/// cache.append_sampled(&[8], &[-0.125], Some(4)).unwrap();
/// cache.push_message(Message::assistant("b"));
/// // Only the turn's tokens and messages travel, as JSON if need be.
/// let delta = cache.delta_since(at).unwrap();
/// let json = serde_json::to_string(&delta).unwrap();
/// copy.apply_delta(&serde_json::from_str(&json).unwrap()).unwrap();
/// assert_eq!(copy, cache);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheDelta {
    /// Messages kept before the appended ones.
    messages_from: usize,
    messages: Vec<Message>,
    /// Response tokens kept before the appended ones.
    response_from: usize,
    response_ids: Vec<u32>,
    response_mask: Vec<u8>,
    response_logprobs: Vec<f32>,
    provenance: Vec<Provenance>,
    logprobs_missing: bool,
    assistant_turns: u32,
    append_only: bool,
    limits: LengthLimits,
}

impl CacheDelta {
    /// How many response tokens the delta appends.
    pub fn appended_tokens(&self) -> usize {
        self.response_ids.len()
    }
}

impl RolloutCache {
    /// What was appended since `at` (a checkpoint of this cache's history), copying only
    /// that. Fails when `at` is not a point of this cache's history.
    pub fn delta_since(&self, at: CacheCheckpoint) -> Result<CacheDelta> {
        self.check_prefix(&at)?;
        let r = at.response;
        let (ids, mask, lps, prov, missing) = match &self.tokens {
            Some(t) => (
                t.response_ids[r..].to_vec(),
                t.response_mask[r..].to_vec(),
                t.response_logprobs[r..].to_vec(),
                t.provenance[r..].to_vec(),
                t.logprobs_missing,
            ),
            None => Default::default(),
        };
        Ok(CacheDelta {
            messages_from: at.messages,
            messages: self.messages[at.messages..].to_vec(),
            response_from: r,
            response_ids: ids,
            response_mask: mask,
            response_logprobs: lps,
            provenance: prov,
            logprobs_missing: missing,
            assistant_turns: self.assistant_turns,
            append_only: self.append_only,
            limits: self.limits,
        })
    }

    /// Cuts the cache back to the delta's starting point and appends what it holds: the
    /// cache it was taken from, when this cache's state at that point is the same. Fails,
    /// leaving the cache unchanged, when the delta does not fit (its starting point is past
    /// this cache's end, its token fields differ in length, or they break the trace
    /// invariants: mask 1 exactly on sampled tokens, logprob 0 where the mask is 0).
    pub fn apply_delta(&mut self, delta: &CacheDelta) -> Result<()> {
        let bad = |why: String| {
            Err(Error::invalid_input(format!(
                "rollout `{}`: {why}",
                self.id
            )))
        };
        if delta.messages_from > self.messages.len() {
            return bad(format!(
                "a delta from message {} does not fit {} messages",
                delta.messages_from,
                self.messages.len()
            ));
        }
        let n = delta.response_ids.len();
        if delta.response_mask.len() != n
            || delta.response_logprobs.len() != n
            || delta.provenance.len() != n
        {
            return bad("a delta's token fields differ in length".into());
        }
        for ((&m, &lp), p) in delta
            .response_mask
            .iter()
            .zip(&delta.response_logprobs)
            .zip(&delta.provenance)
        {
            if m > 1 || (m == 1) != (p.source == TokenSource::Sampled) || (m == 0 && lp != 0.0) {
                return bad("a delta's tokens break the trace invariants".into());
            }
        }
        match &mut self.tokens {
            Some(t) => {
                if delta.response_from > t.response_ids.len() {
                    return bad(format!(
                        "a delta from response token {} does not fit {} tokens",
                        delta.response_from,
                        t.response_ids.len()
                    ));
                }
                let r = delta.response_from;
                t.response_ids.truncate(r);
                t.response_ids.extend_from_slice(&delta.response_ids);
                t.response_mask.truncate(r);
                t.response_mask.extend_from_slice(&delta.response_mask);
                t.response_logprobs.truncate(r);
                t.response_logprobs
                    .extend_from_slice(&delta.response_logprobs);
                t.provenance.truncate(r);
                t.provenance.extend_from_slice(&delta.provenance);
                t.logprobs_missing = delta.logprobs_missing;
            }
            None if delta.response_from == 0 && n == 0 => {}
            None => return bad("a delta with tokens for a cache without a token trace".into()),
        }
        self.messages.truncate(delta.messages_from);
        self.messages.extend_from_slice(&delta.messages);
        self.assistant_turns = delta.assistant_turns;
        self.append_only = delta.append_only;
        self.limits = delta.limits;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> RolloutCache {
        let mut c = RolloutCache::with_tokens(
            "d",
            vec![Message::user("q")],
            vec![],
            vec![1, 2, 3],
            LengthLimits::default(),
        )
        .unwrap();
        c.append_sampled(&[4, 5], &[-0.5, -1.5], Some(1)).unwrap();
        c.push_message(Message::assistant("a"));
        c
    }

    #[test]
    fn a_delta_from_an_earlier_point_replaces_what_came_after_it() {
        // A rollback: the old cache went on past `at`, the new one took another way.
        let base = cache();
        let at = base.checkpoint();
        let mut old = base.clone();
        old.append_inserted(&[9, 9], TokenSource::Observation)
            .unwrap();
        old.push_message(Message::user("old"));
        let mut new = base;
        new.append_inserted(&[7], TokenSource::Observation).unwrap();
        new.push_message(Message::user("new"));
        new.append_sampled(&[8], &[-0.25], None).unwrap();
        new.mark_logprobs_missing();
        new.mark_not_append_only();
        old.apply_delta(&new.delta_since(at).unwrap()).unwrap();
        assert_eq!(old, new);
        old.check_invariants().unwrap();
    }

    #[test]
    fn a_delta_that_does_not_fit_leaves_the_cache_unchanged() {
        let mut long = cache();
        long.append_inserted(&[7, 7], TokenSource::Observation)
            .unwrap();
        long.push_message(Message::user("x"));
        let at = long.checkpoint();
        long.push_message(Message::assistant("y"));
        let delta = long.delta_since(at).unwrap();
        let mut short = cache();
        let before = short.clone();
        assert!(short.apply_delta(&delta).is_err());
        assert_eq!(short, before);
        // A mask-1 token that is not sampled.
        let mut json = serde_json::to_value(cache().delta_since(at_start()).unwrap()).unwrap();
        json["response_mask"][0] = 1.into();
        json["provenance"][0]["source"] = "observation".into();
        let forged: CacheDelta = serde_json::from_value(json).unwrap();
        let mut c = cache();
        assert!(c.apply_delta(&forged).is_err());
        assert_eq!(c, cache());
    }

    fn at_start() -> CacheCheckpoint {
        RolloutCache::with_tokens(
            "d",
            vec![Message::user("q")],
            vec![],
            vec![1, 2, 3],
            LengthLimits::default(),
        )
        .unwrap()
        .checkpoint()
    }
}
