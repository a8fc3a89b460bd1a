//! A session: the chains one harness run grows, its reward, and how a request finds its chain.

use uniagent_core::codec::Codec;
use uniagent_core::{Error, LengthLimits, RewardOutcome, RolloutCache};

use crate::chain::matching::{relate, Relation};
use crate::chain::{extend, Base, Chain, ChainOrigin, ExtendError};
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
}

/// Where a request's generation runs: a working copy of a chain's tokens, committed only when
/// the generation succeeds.
#[derive(Debug)]
pub(crate) struct Placement {
    /// The chain to replace, or `None` for a new chain.
    pub chain: Option<usize>,
    /// The tokens to generate after (ending with the generation prompt once the sampled turn
    /// is appended by the codec).
    pub work: RolloutCache,
    /// How to rebuild `work`'s state (before the turn about to be sampled); `None`: the
    /// chain's current state plus `appended`.
    pub base: Option<Base>,
    /// The messages appended to the chain's current state (when `base` is `None`).
    pub appended: Vec<uniagent_core::Message>,
    /// The origin of a new chain.
    pub origin: ChainOrigin,
    /// Whether this is a rollback of `chain`.
    pub rollback: bool,
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

    /// Finds or makes the chain for `req`: the newest chain it extends, else the newest it
    /// rolls back, else a new chain (see [`ChainOrigin`]).
    pub(crate) fn place(
        &self,
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
        let extends = relations
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, r)| match r {
                Relation::Extends { from } => Some((i, *from)),
                _ => None,
            });
        if let Some((i, from)) = extends {
            let chain = &self.chains[i];
            let appended = req.messages[from..].to_vec();
            let mut work = chain.cache.clone();
            match attempt(codec, &mut work, &appended)? {
                Attempt::Done => {
                    return Ok(Placement {
                        chain: Some(i),
                        work,
                        base: None,
                        appended,
                        origin: chain.origin,
                        rollback: false,
                    })
                }
                Attempt::NewChain(o) => origin = o,
            }
        } else if let Some((i, from)) =
            relations
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, r)| match r {
                    Relation::RollsBack { from } => Some((i, *from)),
                    _ => None,
                })
        {
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
                        Base::After(s, a) => {
                            let mut a = a.clone();
                            a.extend_from_slice(extra);
                            Base::After(s.clone(), a)
                        }
                    };
                    match attempt(codec, &mut work, extra)? {
                        Attempt::Done => {
                            return Ok(Placement {
                                chain: Some(i),
                                work,
                                base: Some(base),
                                appended: Vec::new(),
                                origin: chain.origin,
                                rollback: true,
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
        Ok(Placement {
            chain: None,
            work,
            base: Some(Base::Start(req.messages.clone())),
            appended: Vec::new(),
            origin,
            rollback: false,
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
