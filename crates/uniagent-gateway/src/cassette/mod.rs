//! Gateway cassettes: the record of one session, exact enough to rebuild every answer and
//! every chain's trajectory without a model.
//!
//! With cassettes on ([`Gateway::with_cassettes`](crate::Gateway::with_cassettes)), each
//! completion exchange of a session is kept with the session: the route and the body the
//! harness sent, the generator call it made (uniagent-core's cassette [`Step`]: the
//! [`GenerateRequest`](uniagent_core::GenerateRequest) with its prompt ids and seed, the sampled
//! ids, logprobs and weight version), where the request was placed (which chain, extended,
//! rolled back or new), and the status and body (or event sequence) the harness received.
//! Ending the session appends one [`GatewayCassette`] line to `cassettes.jsonl`, with the
//! reward posted and the trajectories `end` returned.
//!
//! [`replay`] feeds the recorded bodies, in order, to a fresh gateway over a generator that
//! answers from the cassette (no model), and reports the first [`GatewayDivergence`].
//!
//! A line is told from a loop cassette (`uniagent run`, [`uniagent_core::cassette`]) by its
//! `"kind": "gateway"`; both carry the version field `"cassette": 1`. That envelope, the file
//! name and the JSON Schema of both kinds belong to uniagent-core's
//! [`formats::cassettes`](uniagent_core::formats::cassettes); this module owns the body.
//!
//! ```
//! use uniagent_gateway::cassette::{is_gateway_cassette, GatewayCassette};
//! let line: serde_json::Value = serde_json::json!({"cassette": 1, "kind": "gateway"});
//! assert!(is_gateway_cassette(&line));
//! let err = GatewayCassette::from_json(r#"{"cassette": 7, "kind": "gateway"}"#).unwrap_err();
//! assert!(err.to_string().contains("version 7"), "{err}");
//! ```

mod diff;
mod replay;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use uniagent_core::cassette::Step;
use uniagent_core::formats::cassettes::{self, CassetteKind};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::RewardOutcome;

use crate::chain::ChainOrigin;
use crate::config::GatewayConfig;
use crate::error::{GatewayError, Result};
use crate::exchange::{ReplyBody, Route, Stamp};

pub use diff::first_json_difference;
pub use replay::{replay, GatewayDivergence, GatewayReplayOutcome};

/// The `kind` of a gateway cassette line (uniagent-core's
/// [`formats::cassettes::GATEWAY_KIND`](uniagent_core::formats::cassettes::GATEWAY_KIND)).
pub const GATEWAY_KIND: &str = cassettes::GATEWAY_KIND;

/// The file name of the cassettes inside the output directory (the same as `uniagent run`
/// writes: uniagent-core's
/// [`formats::cassettes::FILE_NAME`](uniagent_core::formats::cassettes::FILE_NAME)).
pub const CASSETTES: &str = cassettes::FILE_NAME;

/// Whether a parsed cassettes line is a gateway cassette (`"kind": "gateway"`; see
/// [`formats::cassettes::kind_of`](uniagent_core::formats::cassettes::kind_of) for the
/// version-checked kind).
pub fn is_gateway_cassette(line: &Value) -> bool {
    cassettes::is_gateway(line)
}

/// One ended session, recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayCassette {
    /// Format version, uniagent-core's
    /// [`CASSETTE_VERSION`](uniagent_core::cassette::CASSETTE_VERSION).
    pub cassette: u32,
    /// [`GATEWAY_KIND`].
    pub kind: String,
    /// The session id.
    pub id: String,
    /// The uniagent version that recorded it.
    pub uniagent_version: String,
    /// The generator backend's name (`tch`, `vllm`, ...).
    pub generator: String,
    /// The gateway settings it ran with.
    pub config: GatewayConfig,
    /// The tool-call parser of the codec in use (the config's, or the model directory's
    /// default).
    pub tool_parser: Option<ToolCallFormat>,
    /// The completion exchanges, in the order the gateway answered them.
    pub exchanges: Vec<Exchange>,
    /// The reward posted for the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<RewardOutcome>,
    /// The trajectories `end` returned, one per chain.
    pub trajectories: Vec<Value>,
    /// What the recorder's caller needs to rebuild the codec (the CLI: `codec_dir`); `null`
    /// when nothing.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
}

impl GatewayCassette {
    /// Parses one gateway cassette; another version or kind, or a malformed object, is
    /// [`GatewayError::InvalidRequest`].
    pub fn from_json(text: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text)
            .map_err(|source| cassettes::CassetteError::NotJson { source })?;
        Self::from_value(value)
    }

    /// Decodes one gateway cassette from a JSON value (see [`from_json`](Self::from_json));
    /// the envelope is checked by uniagent-core's
    /// [`formats::cassettes::decode`](uniagent_core::formats::cassettes::decode).
    pub fn from_value(value: Value) -> Result<Self> {
        Ok(cassettes::decode(value, CassetteKind::Gateway)?)
    }

    /// The cassette as one line of `cassettes.jsonl`, `\n` included (uniagent-core's
    /// [`formats::cassettes::to_line`](uniagent_core::formats::cassettes::to_line)).
    pub fn to_line(&self) -> Result<Vec<u8>> {
        cassettes::to_line(self).map_err(|e| GatewayError::Recording {
            message: e.to_string(),
        })
    }

    /// The number of generator calls recorded.
    pub fn generations(&self) -> usize {
        self.exchanges
            .iter()
            .filter(|e| e.generation.is_some())
            .count()
    }
}

/// One completion request and what the harness received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exchange {
    /// The route it came in on.
    pub route: Route,
    /// The body exactly as the harness sent it (its text: a replay must parse the same bytes,
    /// down to the positions a parse error names). A body that is not UTF-8 is not recorded.
    #[serde(deserialize_with = "body_text")]
    pub body: String,
    /// Where it was placed; absent when it was rejected before placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placed>,
    /// The generator call it made, if any ([`Step::Generate`] or [`Step::GenerateError`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<Step>,
    /// The HTTP status returned.
    pub status: u16,
    /// The answer (or error) body returned.
    pub reply: ReplyBody,
    /// The answer's id and time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<Stamp>,
}

/// Reads `body`. The first gateway cassettes (before commit `b5728f2`) held the body as a JSON
/// value rather than its text; such a body reads as its compact encoding, the bytes their
/// replay sent.
fn body_text<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(text) => text,
        value => value.to_string(),
    })
}

/// Where a request was placed among the session's chains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placed {
    /// The chain's index in the session.
    pub chain: usize,
    /// What happened to it.
    pub action: Action,
    /// Why a new chain was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<ChainOrigin>,
}

impl std::fmt::Display for Placed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let action = match self.action {
            Action::Extend => "extend",
            Action::Rollback => "roll back",
            Action::New => "start",
        };
        write!(f, "{action} chain {}", self.chain)?;
        if let Some(origin) = self.origin {
            let why = serde_json::to_value(origin).unwrap_or(Value::Null);
            write!(f, " ({})", why.as_str().unwrap_or("?"))?;
        }
        Ok(())
    }
}

/// What a request did to its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Appended to a chain whose messages it continues.
    Extend,
    /// Returned a chain to before its last assistant turn, then appended.
    Rollback,
    /// Started a new chain.
    New,
}

#[cfg(test)]
mod tests;
