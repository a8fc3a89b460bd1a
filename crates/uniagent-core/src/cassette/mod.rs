//! Cassettes: the record of one rollout, exact enough to rebuild its trajectory token for token
//! without a model or a sandbox.
//!
//! A [`Cassette`] holds the task, the tool specs, the loop configuration, every step of the
//! rollout in order — each generation's [`GenerateRequest`] and [`GenerateOutput`], each tool
//! call with what the tool returned — and the token record of the finished trajectory, for
//! checking a replay against.
//!
//! - Recording wraps the pieces, the loop is untouched: a [`RecordGenerator`] around the
//!   [`TokenGenerator`](crate::TokenGenerator) and a [`RecordTool`] around each tool append to
//!   one shared [`Recorder`], keyed by rollout id; [`Recorder::cassette`] assembles a finished
//!   rollout's cassette from its trajectory.
//! - Replaying (feature `codec`, [`replay`]) runs the same loop and codec over a generator that
//!   answers from the cassette (keyed by the exact prompt ids) and tools that answer recorded
//!   observations ([`ToolMode::Recorded`]) or run the real tools in a fresh sandbox and compare
//!   ([`ToolMode::Live`]), then compares the rebuilt token record with the recorded one. The
//!   first difference is a typed [`Divergence`].
//!
//! The format is one JSON object per cassette (one line of a `cassettes.jsonl`), with a
//! version field `"cassette": 1`; its envelope, file name and JSON Schema are owned by
//! [`formats::cassettes`](crate::formats::cassettes). [`Cassette::from_json`] rejects other
//! versions, gateway cassettes and malformed input with [`Error::InvalidInput`];
//! [`Cassette::to_line`] is the line writers append.
//!
//! ```
//! use uniagent_core::cassette::{Cassette, CASSETTE_VERSION};
//! let err = Cassette::from_json(r#"{"cassette": 99}"#).unwrap_err();
//! assert!(err.to_string().contains("version 99"), "{err}");
//! assert_eq!(CASSETTE_VERSION, 1);
//! ```

mod divergence;
mod record;
#[cfg(feature = "codec")]
mod replay;
#[cfg(feature = "codec")]
mod tape;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{ExitReason, LoopConfig, Trajectory};
use crate::error::{Error, ErrorKind, Result};
use crate::formats::cassettes::{self, CassetteKind};
use crate::generator::{GenerateOutput, GenerateRequest};
use crate::message::ToolSpec;
use crate::task::Task;
use crate::tool::ToolOutput;

pub use divergence::{first_difference, truncate_text, Divergence};
pub use record::{RecordGenerator, RecordTool, Recorder};
#[cfg(feature = "codec")]
pub use replay::{replay, ReplayOutcome, ReplaySetup, ToolMode};

/// The cassette format version this build writes and reads
/// ([`formats::cassettes::VERSION`](crate::formats::cassettes::VERSION)).
pub const CASSETTE_VERSION: u32 = cassettes::VERSION;

/// One rollout, recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cassette {
    /// Format version, [`CASSETTE_VERSION`].
    pub cassette: u32,
    /// The rollout id (`<task id>:<sample>`) it ran under.
    pub id: String,
    /// The uniagent version that recorded it.
    pub uniagent_version: String,
    /// The generator backend's name (`vllm`, `tch`, ...).
    pub generator: String,
    /// The task.
    pub task: Task,
    /// The sample index the rollout ran under.
    pub sample: u32,
    /// The tool specs offered to the model.
    pub tools: Vec<ToolSpec>,
    /// The loop configuration it ran with.
    #[serde(rename = "loop")]
    pub loop_config: LoopConfig,
    /// Every generation and tool call, in the order they happened.
    pub steps: Vec<Step>,
    /// The token record of the finished trajectory.
    pub trajectory: RecordedTrajectory,
    /// What the recorder's caller needs to rebuild the run (the CLI: its resolved
    /// configuration); `null` when nothing.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
}

impl Cassette {
    /// Parses one cassette; a wrong version or a malformed object is
    /// [`Error::InvalidInput`].
    pub fn from_json(text: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text)
            .map_err(|source| cassettes::CassetteError::NotJson { source })?;
        Self::from_value(value)
    }

    /// Decodes one cassette from a JSON value (see [`from_json`](Self::from_json)); the
    /// envelope is checked by [`formats::cassettes::decode`](crate::formats::cassettes::decode).
    pub fn from_value(value: Value) -> Result<Self> {
        let cassette: Self = cassettes::decode(value, CassetteKind::Loop)?;
        cassette.check_logprobs()?;
        Ok(cassette)
    }

    /// The cassette as one line of `cassettes.jsonl`, `\n` included
    /// ([`formats::cassettes::to_line`](crate::formats::cassettes::to_line)).
    pub fn to_line(&self) -> Result<Vec<u8>> {
        Ok(cassettes::to_line(self)?)
    }

    /// Logprobs are finite (a number beyond `f32` would not survive re-encoding).
    fn check_logprobs(&self) -> Result<()> {
        let recorded = self.trajectory.response_logprobs.iter().flatten();
        let sampled = self
            .generations()
            .flat_map(|(_, o)| o.logprobs.iter().flatten());
        match recorded.chain(sampled).find(|lp| !lp.is_finite()) {
            Some(lp) => Err(Error::invalid_input(format!(
                "malformed cassette: logprob {lp} is not a finite 32-bit float"
            ))),
            None => Ok(()),
        }
    }

    /// The generations, in order.
    pub fn generations(&self) -> impl Iterator<Item = (&GenerateRequest, &GenerateOutput)> {
        self.steps.iter().filter_map(|s| match s {
            Step::Generate { request, output } => Some((request, output)),
            Step::GenerateError { .. } | Step::Tool { .. } => None,
        })
    }
}

/// One step of a rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A model call: the request as the generator received it and what it returned.
    Generate {
        /// The request.
        request: GenerateRequest,
        /// The output.
        output: GenerateOutput,
    },
    /// A model call that failed (it ended the rollout as a model error).
    GenerateError {
        /// The request.
        request: GenerateRequest,
        /// The error's kind.
        kind: ErrorKind,
        /// The error's text.
        message: String,
    },
    /// A tool call and what the tool returned.
    Tool {
        /// The assistant turn (0-based) whose call this is.
        turn: u32,
        /// The tool's name.
        name: String,
        /// The call id the model's turn gave it.
        call_id: String,
        /// The parsed arguments object.
        arguments: Value,
        /// What the call returned.
        outcome: ToolOutcome,
    },
}

/// What a tool call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolOutcome {
    /// An observation (success, failure or timeout as the model sees it).
    Output {
        /// The tool's output, before the loop clips it.
        output: ToolOutput,
    },
    /// An infrastructure error.
    Error {
        /// Its kind (a timeout becomes the loop's timeout message).
        kind: ErrorKind,
        /// Its text.
        message: String,
    },
    /// The loop stopped waiting (its transport deadline passed) before the tool answered.
    Abandoned,
}

/// The token record of a finished rollout, what a replay must rebuild.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedTrajectory {
    /// How the rollout ended.
    pub exit_reason: ExitReason,
    /// The prompt's ids.
    pub prompt_ids: Vec<u32>,
    /// Sampled ids and observations, in order.
    pub response_ids: Vec<u32>,
    /// 1 for sampled tokens, 0 for observations.
    pub response_mask: Vec<u8>,
    /// One logprob per response token, when the backend gave them.
    #[serde(default)]
    pub response_logprobs: Option<Vec<f32>>,
}

impl RecordedTrajectory {
    /// The token record of `t`.
    pub fn of(t: &Trajectory) -> Self {
        Self {
            exit_reason: t.exit_reason,
            prompt_ids: t.output.prompt_ids.clone(),
            response_ids: t.output.response_ids.clone(),
            response_mask: t.output.response_mask.clone(),
            response_logprobs: t.output.response_logprobs.clone(),
        }
    }

    /// The first difference between this (recorded) record and `got`, if any. The exit reason
    /// is compared last, and not when the recorded ending depends on the reward
    /// ([`ExitReason::RewardError`]), which a replay does not compute.
    pub fn compare(&self, got: &Self) -> Option<Divergence> {
        let ids = [
            ("prompt_ids", &self.prompt_ids, &got.prompt_ids),
            ("response_ids", &self.response_ids, &got.response_ids),
        ];
        for (field, a, b) in ids {
            if let Some(d) = Divergence::in_field(field, a, b) {
                return Some(d);
            }
        }
        if let Some(d) =
            Divergence::in_field("response_mask", &self.response_mask, &got.response_mask)
        {
            return Some(d);
        }
        let empty = Vec::new();
        let a = self.response_logprobs.as_ref().unwrap_or(&empty);
        let b = got.response_logprobs.as_ref().unwrap_or(&empty);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        if bits(a) != bits(b) {
            return Divergence::in_field("response_logprobs", a, b);
        }
        if self.exit_reason != got.exit_reason && self.exit_reason != ExitReason::RewardError {
            return Some(Divergence::ExitReason {
                expected: self.exit_reason,
                got: got.exit_reason,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests;
