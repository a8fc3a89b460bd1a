//! [`Divergence`]: where a replay first parted from its cassette.

use std::fmt::{Debug, Display};

use serde::{Deserialize, Serialize};

use crate::agent::ExitReason;

/// Longest text a divergence quotes (tool arguments, observations); longer ones are cut.
const QUOTE_CHARS: usize = 200;

/// The first place a replay differs from its cassette. Turns are 0-based assistant turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Divergence {
    /// The prompt the loop sent at `turn` differs from the recorded one at token `position`
    /// (`None`: that side has no token there, it is shorter).
    #[error("turn {turn}: the prompt differs at token {position}: recorded {expected:?}, replayed {got:?}")]
    Prompt {
        /// The assistant turn being generated.
        turn: u32,
        /// The first differing position in the prompt.
        position: usize,
        /// The recorded id there.
        expected: Option<u32>,
        /// The replayed id there.
        got: Option<u32>,
    },
    /// The loop asked for a generation (`Generate`) or a tool call (`Tool`) where the cassette
    /// has the other kind of step, or nothing more.
    #[error("turn {turn}: the replay asked for {got} where the cassette has {expected}")]
    Step {
        /// The assistant turn.
        turn: u32,
        /// What the cassette has next (`a generation`, `a call of tool X`, `nothing`).
        expected: String,
        /// What the replay asked for.
        got: String,
    },
    /// The loop called a tool with other arguments than recorded.
    #[error("turn {turn}: tool `{tool}` was called with {got} where the cassette has {expected}")]
    Arguments {
        /// The assistant turn.
        turn: u32,
        /// The tool.
        tool: String,
        /// The recorded arguments (JSON, cut to 200 characters).
        expected: String,
        /// The replayed arguments (JSON, cut).
        got: String,
    },
    /// A tool re-run live returned something else than recorded.
    #[error("turn {turn}: tool `{tool}` returned {got:?} where the cassette has {expected:?}")]
    Observation {
        /// The assistant turn.
        turn: u32,
        /// The tool.
        tool: String,
        /// The recorded result (cut to 200 characters).
        expected: String,
        /// The live result (cut).
        got: String,
    },
    /// The rebuilt trajectory's token field `field` differs at `position`.
    #[error(
        "trajectory field `{field}` differs at {position}: recorded {expected}, replayed {got}"
    )]
    Trajectory {
        /// `prompt_ids`, `response_ids`, `response_mask` or `response_logprobs`.
        field: String,
        /// The first differing index.
        position: usize,
        /// The recorded value there (`none` past its end).
        expected: String,
        /// The replayed value there (`none` past its end).
        got: String,
    },
    /// The rollout ended otherwise.
    #[error("the rollout ended as `{got}` where the cassette ended as `{expected}`")]
    ExitReason {
        /// The recorded ending.
        expected: ExitReason,
        /// The replayed ending.
        got: ExitReason,
    },
}

impl Divergence {
    /// A [`Divergence::Trajectory`] at the first difference of `field`, if any.
    pub fn in_field<T: PartialEq + Display>(
        field: &str,
        expected: &[T],
        got: &[T],
    ) -> Option<Self> {
        let position = first_difference(expected, got)?;
        let show = |v: Option<&T>| v.map_or_else(|| "none".to_owned(), ToString::to_string);
        Some(Self::Trajectory {
            field: field.to_owned(),
            position,
            expected: show(expected.get(position)),
            got: show(got.get(position)),
        })
    }

    /// The assistant turn it happened at, when it belongs to one.
    pub fn turn(&self) -> Option<u32> {
        match self {
            Self::Prompt { turn, .. }
            | Self::Step { turn, .. }
            | Self::Arguments { turn, .. }
            | Self::Observation { turn, .. } => Some(*turn),
            Self::Trajectory { .. } | Self::ExitReason { .. } => None,
        }
    }
}

/// The first index where `a` and `b` differ (a length difference counts at the shorter
/// length); `None` when equal.
///
/// ```
/// use uniagent_core::cassette::first_difference;
/// assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 4]), Some(2));
/// assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
/// assert_eq!(first_difference(&[1, 2], &[1, 2]), None);
/// ```
pub fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// `text` cut to 200 characters (with `…` when cut), for quoting in a [`Divergence`].
pub fn truncate_text(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
