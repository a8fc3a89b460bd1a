//! Replaying a [`GatewayCassette`]: the recorded bodies through a fresh gateway whose
//! generator answers from the cassette, compared exchange by exchange and chain by chain.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};
use uniagent_core::cassette::{first_difference, Step};
use uniagent_core::codec::Codec;
use uniagent_core::{
    AgentLoopOutput, Error as CoreError, GenerateOutput, GenerateRequest, TokenGenerator,
};

use super::diff::first_json_difference;
use super::{Exchange, GatewayCassette};
use crate::error::{GatewayError, Result};
use crate::exchange::ReplyBody;
use crate::gateway::Gateway;

/// Trajectory fields compared first, in this order (the token fields, then the
/// conversation); then the others, sorted.
fn trajectory_first() -> Vec<&'static str> {
    let mut first = AgentLoopOutput::TOKEN_FIELDS.to_vec();
    first.push("messages");
    first
}

/// Trajectory fields a replay does not rebuild: wall-clock timings.
const NOT_REPLAYED: &[&str] = &["timings"];

/// The first place a gateway replay differs from its cassette. `request` is the 0-based index
/// of the exchange in the session.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GatewayDivergence {
    /// The prompt the gateway built for `request` differs from the recorded one at token
    /// `position` (`None`: that side is shorter).
    #[error("request {request}: the prompt differs at token {position}: recorded {expected:?}, replayed {got:?}")]
    Prompt {
        /// The exchange.
        request: usize,
        /// The first differing position.
        position: usize,
        /// The recorded id there.
        expected: Option<u32>,
        /// The replayed id there.
        got: Option<u32>,
    },
    /// The generator call of `request` differs elsewhere than in the prompt (sampling, token
    /// budget, stop ids), or one side made a call and the other did not.
    #[error("request {request}: the generator call differs at {at}: recorded {expected}, replayed {got}")]
    Generation {
        /// The exchange.
        request: usize,
        /// A JSON pointer into the request (`/` for the call as a whole).
        at: String,
        /// The recorded value.
        expected: String,
        /// The replayed value.
        got: String,
    },
    /// `request` was placed elsewhere (another chain, or extend / rollback / new).
    #[error("request {request} was placed as `{got}` where the cassette has `{expected}`")]
    Placement {
        /// The exchange.
        request: usize,
        /// The recorded placement.
        expected: String,
        /// The replayed placement (`rejected` when the replay placed it nowhere).
        got: String,
    },
    /// The answer of `request` differs (status, body or events) at `at`.
    #[error("request {request}: the answer differs at {at}: recorded {expected}, replayed {got}")]
    Answer {
        /// The exchange.
        request: usize,
        /// `/status`, or a JSON pointer into the body (events: `/N/data/...`).
        at: String,
        /// The recorded value.
        expected: String,
        /// The replayed value.
        got: String,
    },
    /// Chain `chain`'s trajectory differs at `at`.
    #[error("chain {chain}: the trajectory differs at {at}: recorded {expected}, replayed {got}")]
    Trajectory {
        /// The chain.
        chain: usize,
        /// A JSON pointer into the trajectory record (`/response_ids/12`, ...).
        at: String,
        /// The recorded value.
        expected: String,
        /// The replayed value.
        got: String,
    },
    /// The session ended with another number of chains.
    #[error("the session ended with {got} chains where the cassette has {expected}")]
    Chains {
        /// Recorded.
        expected: usize,
        /// Replayed.
        got: usize,
    },
}

/// The result of replaying one gateway cassette.
#[derive(Debug, Clone)]
pub struct GatewayReplayOutcome {
    /// The rebuilt trajectories (as `end` returned them).
    pub trajectories: Vec<Value>,
    /// The first divergence; `None` when every answer and every chain is identical.
    pub divergence: Option<GatewayDivergence>,
}

/// Replays `cassette` with `codec` (the recording gateway's tokenizer and chat template; the
/// cassette's tool parser is applied): each recorded body is sent, in order, to a fresh
/// gateway with the cassette's settings, whose generator checks the call against the recorded
/// one and answers the recorded output; the placement, status and answer (with the recorded
/// id and time) are compared, then the recorded reward is posted, the session ended and each
/// chain's trajectory compared (timings aside). Stops at the first divergence. An answer the
/// recorded generator failed on is compared by status only (the error text names the
/// backend). `Err` is for a cassette that cannot be replayed at all.
pub async fn replay(cassette: &GatewayCassette, codec: Codec) -> Result<GatewayReplayOutcome> {
    let tape = Arc::new(TapeGenerator {
        name: cassette.generator.clone(),
        slot: Mutex::new(Slot::default()),
    });
    let mut config = cassette.config.clone();
    config.tool_parser = cassette.tool_parser;
    let gateway = Gateway::new(codec, Arc::clone(&tape) as Arc<dyn TokenGenerator>, config);
    let session = cassette.id.as_str();
    let done = |divergence| GatewayReplayOutcome {
        trajectories: Vec::new(),
        divergence: Some(divergence),
    };
    for (request, exchange) in cassette.exchanges.iter().enumerate() {
        tape.load(request, exchange.generation.clone())?;
        let (reply, placed) = gateway
            .exchange_placed(
                session,
                exchange.route,
                exchange.body.as_bytes(),
                exchange.stamp.clone(),
            )
            .await;
        if let Some(d) = tape.finish()? {
            return Ok(done(d));
        }
        if placed != exchange.placement {
            let show = |p: &Option<super::Placed>| {
                p.as_ref()
                    .map_or_else(|| "rejected".to_owned(), ToString::to_string)
            };
            return Ok(done(GatewayDivergence::Placement {
                request,
                expected: show(&exchange.placement),
                got: show(&placed),
            }));
        }
        if let Some(d) = compare_reply(request, exchange, reply.status.as_u16(), &reply.body) {
            return Ok(done(d));
        }
    }
    if let Some(reward) = &cassette.reward {
        // Recorded sessions were open when rewarded (a harness session before its first
        // request, too).
        gateway.open(session)?;
        gateway.reward(session, reward.clone()).await?;
    }
    let trajectories = gateway.end(session).await?;
    let divergence = compare_trajectories(&cassette.trajectories, &trajectories);
    Ok(GatewayReplayOutcome {
        trajectories,
        divergence,
    })
}

fn compare_reply(
    request: usize,
    exchange: &Exchange,
    status: u16,
    body: &ReplyBody,
) -> Option<GatewayDivergence> {
    if status != exchange.status {
        return Some(GatewayDivergence::Answer {
            request,
            at: "/status".into(),
            expected: exchange.status.to_string(),
            got: status.to_string(),
        });
    }
    if matches!(exchange.generation, Some(Step::GenerateError { .. })) {
        return None;
    }
    let (at, expected, got) =
        first_json_difference(&comparable(&exchange.reply), &comparable(body), &[])?;
    Some(GatewayDivergence::Answer {
        request,
        at,
        expected,
        got,
    })
}

/// A body as one JSON value: event data parsed where it is JSON, so that a difference is
/// located inside the event.
fn comparable(body: &ReplyBody) -> Value {
    match body {
        ReplyBody::Json(v) => v.clone(),
        ReplyBody::Events(events) => Value::Array(
            events
                .iter()
                .map(|e| {
                    let data = serde_json::from_str(&e.data)
                        .unwrap_or_else(|_| Value::String(e.data.clone()));
                    json!({"event": e.event, "data": data})
                })
                .collect(),
        ),
    }
}

fn compare_trajectories(recorded: &[Value], replayed: &[Value]) -> Option<GatewayDivergence> {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            for key in NOT_REPLAYED {
                map.remove(*key);
            }
        }
        v
    };
    for (chain, (a, b)) in recorded.iter().zip(replayed).enumerate() {
        if let Some((at, expected, got)) =
            first_json_difference(&strip(a), &strip(b), &trajectory_first())
        {
            return Some(GatewayDivergence::Trajectory {
                chain,
                at,
                expected,
                got,
            });
        }
    }
    (recorded.len() != replayed.len()).then_some(GatewayDivergence::Chains {
        expected: recorded.len(),
        got: replayed.len(),
    })
}

/// A generator that answers each exchange's recorded call, once, after checking the request.
#[derive(Debug)]
struct TapeGenerator {
    name: String,
    slot: Mutex<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    request: usize,
    step: Option<Step>,
    asked: bool,
    divergence: Option<GatewayDivergence>,
}

impl TapeGenerator {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Slot>> {
        self.slot.lock().map_err(|_| GatewayError::Internal {
            message: "replay tape lock poisoned".into(),
        })
    }

    /// Arms the tape with exchange `request`'s recorded call.
    fn load(&self, request: usize, step: Option<Step>) -> Result<()> {
        *self.lock()? = Slot {
            request,
            step,
            asked: false,
            divergence: None,
        };
        Ok(())
    }

    /// The divergence of the exchange just replayed: a wrong call, or a recorded call the
    /// replay never made.
    fn finish(&self) -> Result<Option<GatewayDivergence>> {
        let mut slot = self.lock()?;
        if let Some(d) = slot.divergence.take() {
            return Ok(Some(d));
        }
        Ok(match (&slot.step, slot.asked) {
            (Some(_), false) => Some(GatewayDivergence::Generation {
                request: slot.request,
                at: "/".into(),
                expected: "a generator call".into(),
                got: "none (the request was answered without one)".into(),
            }),
            _ => None,
        })
    }

    fn answer(&self, request: &GenerateRequest) -> std::result::Result<GenerateOutput, String> {
        let mut slot = self
            .slot
            .lock()
            .map_err(|_| "tape lock poisoned".to_owned())?;
        slot.asked = true;
        let index = slot.request;
        let (recorded, answer) = match slot.step.take() {
            Some(Step::Generate { request, output }) => (request, Ok(output)),
            Some(Step::GenerateError {
                request, message, ..
            }) => (request, Err(format!("(recorded) {message}"))),
            _ => {
                let d = GatewayDivergence::Generation {
                    request: index,
                    at: "/".into(),
                    expected: "no generator call".into(),
                    got: "a generator call".into(),
                };
                return Err(diverge(&mut slot, d));
            }
        };
        if let Some(position) = first_difference(&recorded.prompt_ids, &request.prompt_ids) {
            let d = GatewayDivergence::Prompt {
                request: index,
                position,
                expected: recorded.prompt_ids.get(position).copied(),
                got: request.prompt_ids.get(position).copied(),
            };
            return Err(diverge(&mut slot, d));
        }
        if recorded != *request {
            let value = |r: &GenerateRequest| serde_json::to_value(r).unwrap_or(Value::Null);
            if let Some((at, expected, got)) =
                first_json_difference(&value(&recorded), &value(request), &[])
            {
                let d = GatewayDivergence::Generation {
                    request: index,
                    at,
                    expected,
                    got,
                };
                return Err(diverge(&mut slot, d));
            }
        }
        answer
    }
}

fn diverge(slot: &mut Slot, d: GatewayDivergence) -> String {
    let message = format!("replay diverged: {d}");
    slot.divergence.get_or_insert(d);
    message
}

#[async_trait]
impl TokenGenerator for TapeGenerator {
    fn name(&self) -> &str {
        &self.name
    }

    async fn generate(&self, request: GenerateRequest) -> uniagent_core::Result<GenerateOutput> {
        self.answer(&request).map_err(|message| CoreError::Model {
            backend: self.name.clone(),
            message,
            retryable: false,
            source: None,
        })
    }
}
