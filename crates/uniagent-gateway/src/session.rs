//! A session: the chains one harness run grows, its reward, and how a request finds its chain.

use uniagent_core::codec::Codec;
use uniagent_core::{
    CacheCheckpoint, Error, LengthLimits, Message, RewardOutcome, RolloutCache, ToolSpec,
};

use crate::cassette::{Action, Placed};
use crate::chain::matching::{relate, Relation};
use crate::chain::{extend, Base, Chain, ChainOrigin, ExtendError, TurnRecord};
use crate::error::{GatewayError, Result};
use crate::turn::TurnRequest;

/// The state of one session.
#[derive(Debug, Default)]
pub struct Session {
    pub(crate) chains: Vec<Chain>,
    pub(crate) reward: Option<RewardOutcome>,
    pub(crate) turns: u64,
    /// The exchanges recorded for the session's cassette (cassettes on only).
    pub(crate) exchanges: Vec<crate::cassette::Exchange>,
    /// Ended: its record is written. A request that got the session before it ended and ran
    /// after is refused (its turn would be in no record).
    pub(crate) ended: bool,
    /// Responses API answers kept for `previous_response_id`.
    pub(crate) responses: StoredResponses,
}

/// The Responses API answers of one session kept for `previous_response_id`: each the
/// conversation it answered (without `instructions`) and its answer. The newest
/// [`STORED_RESPONSES`] are kept, in memory only.
#[derive(Debug, Default)]
pub(crate) struct StoredResponses {
    order: std::collections::VecDeque<String>,
    by_id: std::collections::HashMap<String, std::sync::Arc<Vec<Message>>>,
}

/// How many responses a session keeps (older ones are dropped first): a client chaining by
/// `previous_response_id` needs only the latest, one replaying branches a few.
pub(crate) const STORED_RESPONSES: usize = 256;

impl StoredResponses {
    /// The conversation of response `id`.
    pub(crate) fn get(&self, id: &str) -> Option<std::sync::Arc<Vec<Message>>> {
        self.by_id.get(id).cloned()
    }

    /// Keeps `conversation` as response `id`, dropping the oldest beyond the limit.
    pub(crate) fn insert(&mut self, id: String, conversation: Vec<Message>) {
        if self
            .by_id
            .insert(id.clone(), std::sync::Arc::new(conversation))
            .is_none()
        {
            self.order.push_back(id);
        }
        while self.order.len() > STORED_RESPONSES {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
    }
}

/// Where a request's generation runs. An extension works on the chain's own cache, in
/// place (a copy of a trace that grows with every turn was most of a request's cost at turn
/// 500), and is rewound to `at` when the request fails or is dropped; a rollback or a new
/// chain works on a cache of its own, committed only when the generation succeeds.
#[derive(Debug)]
pub(crate) enum Placement {
    /// Chain `chain`'s cache was extended in place by `appended` since `at`.
    Extend {
        chain: usize,
        at: CacheCheckpoint,
        appended: Vec<uniagent_core::Message>,
    },
    /// Chain `chain`'s last turn is replaced: `work` is the state before it plus the
    /// request's new messages, which `base` rebuilds.
    Rollback {
        chain: usize,
        work: RolloutCache,
        base: Base,
    },
    /// A new chain from `work`, the template's render of the request.
    New {
        work: RolloutCache,
        base: Base,
        origin: ChainOrigin,
    },
}

/// A [`Placement`] taken apart for sampling: the chain the turn lands on, the cache it is
/// sampled on and what rebuilds the state before it.
#[derive(Debug)]
pub(crate) struct Landing {
    /// The chain (a new chain's index is the next free one) and what happens to it.
    pub(crate) placed: Placed,
    keep: Keep,
    base: Base,
}

/// Where the sampled turn's cache is, and how the chain keeps it.
#[derive(Debug)]
enum Keep {
    /// The chain's own cache, extended in place since `undo`.
    InPlace { undo: CacheCheckpoint },
    /// A rebuilt cache that replaces the chain's (a rollback).
    Replace(RolloutCache),
    /// The cache of a new chain.
    New(RolloutCache, ChainOrigin),
}

impl Placement {
    /// This placement as a [`Landing`]; `next_chain` is the index a new chain gets.
    pub(crate) fn land(self, next_chain: usize) -> Landing {
        let placed = |chain, action, origin| Placed {
            chain,
            action,
            origin,
        };
        match self {
            Placement::Extend {
                chain,
                at,
                appended,
            } => Landing {
                placed: placed(chain, Action::Extend, None),
                keep: Keep::InPlace { undo: at },
                base: Base::After(at, appended),
            },
            Placement::Rollback { chain, work, base } => Landing {
                placed: placed(chain, Action::Rollback, None),
                keep: Keep::Replace(work),
                base,
            },
            Placement::New { work, base, origin } => Landing {
                placed: placed(next_chain, Action::New, Some(origin)),
                keep: Keep::New(work, origin),
                base,
            },
        }
    }
}

impl Landing {
    /// The point of the chain's cache that the sampled turn's cache continues (a journal
    /// line holds only what follows it), or `None` when the cache is new as a whole (a new
    /// chain, or a rollback rebuilt from the template's render).
    pub(crate) fn continues_from(&self) -> Option<CacheCheckpoint> {
        match (&self.keep, &self.base) {
            (Keep::InPlace { undo }, _) => Some(*undo),
            (Keep::Replace(_), Base::After(at, _)) => Some(*at),
            (Keep::Replace(_), Base::Start(_)) | (Keep::New(..), _) => None,
        }
    }
}

impl Session {
    /// The session's chains, in creation order.
    pub fn chains(&self) -> &[Chain] {
        &self.chains
    }

    /// The reward posted for the session.
    pub fn reward(&self) -> Option<&RewardOutcome> {
        self.reward.as_ref()
    }

    /// The cache `landing`'s request samples on: rewound on drop unless committed.
    pub(crate) fn work<'a>(&'a mut self, landing: &'a mut Landing) -> Work<'a> {
        match &mut landing.keep {
            Keep::InPlace { undo } => {
                Work::new(&mut self.chains[landing.placed.chain].cache, Some(*undo))
            }
            Keep::Replace(cache) | Keep::New(cache, _) => Work::new(cache, None),
        }
    }

    /// Keeps a turn sampled on [`Self::work`] (committed): the chain now ends with it, and
    /// `client` (the request's messages and the answer) is its view of the conversation;
    /// `tools` are a new chain's tools.
    pub(crate) fn keep_turn(
        &mut self,
        landing: Landing,
        client: Vec<Message>,
        tools: Vec<ToolSpec>,
        turn: TurnRecord,
    ) {
        self.turns += 1;
        let Landing { placed, keep, base } = landing;
        match keep {
            Keep::InPlace { .. } => self.chains[placed.chain].advance(None, base, client, turn),
            Keep::Replace(cache) => {
                self.chains[placed.chain].advance(Some(cache), base, client, turn)
            }
            Keep::New(cache, origin) => self
                .chains
                .push(Chain::new(cache, client, base, tools, origin, turn)),
        }
    }

    /// Finds or makes the chain for `req`: the newest chain it extends, else the newest it
    /// rolls back, else a new chain (see [`ChainOrigin`]).
    pub(crate) fn place(
        &mut self,
        codec: &Codec,
        id: &str,
        limits: LengthLimits,
        kwargs: &serde_json::Map<String, serde_json::Value>,
        req: &TurnRequest,
    ) -> Result<Placement> {
        let relations: Vec<Relation> = self
            .chains
            .iter()
            .map(|c| relate(&c.client, &c.tools, &req.messages, &req.tools))
            .collect();
        let mut origin = if self.chains.is_empty() {
            ChainOrigin::First
        } else if self.chains.iter().all(|c| c.tools != req.tools) {
            ChainOrigin::ToolsChanged
        } else {
            ChainOrigin::HistoryRewritten
        };
        let newest = |wanted: fn(&Relation) -> Option<usize>| {
            relations
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, r)| wanted(r).map(|from| (i, from)))
        };
        let extends = newest(|r| match r {
            Relation::Extends { from } => Some(*from),
            _ => None,
        });
        let rolls_back = newest(|r| match r {
            Relation::RollsBack { from } => Some(*from),
            _ => None,
        });
        if let Some((i, from)) = extends {
            let cache = &mut self.chains[i].cache;
            let appended = req.messages[from..].to_vec();
            let at = cache.checkpoint();
            let attempted = attempt(codec, cache, &appended);
            if !matches!(attempted, Ok(Attempt::Done)) {
                // Back to the chain as it was: `at` is a point of its own history.
                cache.rewind(at).map_err(GatewayError::from_codec)?;
            }
            match attempted? {
                Attempt::Done => {
                    return Ok(Placement::Extend {
                        chain: i,
                        at,
                        appended,
                    })
                }
                Attempt::NewChain(o) => origin = o,
            }
        } else if let Some((i, from)) = rolls_back {
            let chain = &self.chains[i];
            let rebuilt = chain.rolled_back(codec, id, limits);
            let extra = &req.messages[from..];
            match rebuilt {
                Ok(mut work) => {
                    let base = match &chain.base {
                        Base::Start(m) => {
                            let mut m = m.clone();
                            m.extend_from_slice(extra);
                            Base::Start(m)
                        }
                        Base::After(at, a) => {
                            let mut a = a.clone();
                            a.extend_from_slice(extra);
                            Base::After(*at, a)
                        }
                    };
                    match attempt(codec, &mut work, extra)? {
                        Attempt::Done => {
                            return Ok(Placement::Rollback {
                                chain: i,
                                work,
                                base,
                            })
                        }
                        Attempt::NewChain(o) => origin = o,
                    }
                }
                Err(ExtendError::Codec(e)) if is_limit(&e) => {
                    return Err(GatewayError::from_codec(e))
                }
                Err(_) => origin = ChainOrigin::NotExtensible,
            }
        }
        let work = codec
            .start(
                id,
                req.messages.clone(),
                req.tools.clone(),
                kwargs.clone(),
                limits,
            )
            .map_err(GatewayError::from_codec)?;
        Ok(Placement::New {
            work,
            base: Base::Start(req.messages.clone()),
            origin,
        })
    }
}

enum Attempt {
    Done,
    NewChain(ChainOrigin),
}

/// Appends `messages` to `work`; a chain that stops being append-only, or cannot take the
/// messages, is left for a new one. Length limits are the client's error.
fn attempt(
    codec: &Codec,
    work: &mut RolloutCache,
    messages: &[uniagent_core::Message],
) -> Result<Attempt> {
    let was_append_only = work.append_only();
    match extend(codec, work, messages) {
        Ok(()) if was_append_only && !work.append_only() => {
            Ok(Attempt::NewChain(ChainOrigin::NotAppendOnly))
        }
        Ok(()) => Ok(Attempt::Done),
        Err(ExtendError::Codec(e)) if is_limit(&e) => Err(GatewayError::from_codec(e)),
        Err(ExtendError::NotExtensible(why)) => {
            tracing::debug!("new chain: {why}");
            Ok(Attempt::NewChain(ChainOrigin::NotExtensible))
        }
        Err(ExtendError::Codec(e)) => {
            tracing::debug!("new chain: the incremental append failed: {e}");
            Ok(Attempt::NewChain(ChainOrigin::NotExtensible))
        }
    }
}

fn is_limit(e: &Error) -> bool {
    matches!(e, Error::LengthLimit { .. })
}

/// The cache a request samples on. An in-place extension (`undo` set) is rewound to its
/// checkpoint when the guard is dropped uncommitted: a failed request, or one whose future was
/// dropped mid-generation, leaves its chain as it was.
#[derive(Debug)]
pub(crate) struct Work<'a> {
    cache: &'a mut RolloutCache,
    undo: Option<CacheCheckpoint>,
}

impl<'a> Work<'a> {
    fn new(cache: &'a mut RolloutCache, undo: Option<CacheCheckpoint>) -> Self {
        Self { cache, undo }
    }

    /// Keeps what was appended.
    pub(crate) fn commit(mut self) {
        self.undo = None;
    }
}

impl std::ops::Deref for Work<'_> {
    type Target = RolloutCache;
    fn deref(&self) -> &RolloutCache {
        self.cache
    }
}

impl std::ops::DerefMut for Work<'_> {
    fn deref_mut(&mut self) -> &mut RolloutCache {
        self.cache
    }
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        if let Some(at) = self.undo.take() {
            // The checkpoint was taken on this cache, which only grew since.
            if let Err(e) = self.cache.rewind(at) {
                tracing::error!("rewinding a chain after a failed request: {e}");
            }
        }
    }
}
