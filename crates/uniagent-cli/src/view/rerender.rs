//! The recorded token stream against the template's full re-render of its conversation
//! (`rerender_ids`, written for rollouts the codec flagged as not append-only): the edit
//! script as runs the token view can draw.

use serde::Serialize;
use uniagent_core::codec::Codec;

use super::decode::token_texts;
use super::diff::{edit_script, DiffOp};

/// The most inserted plus deleted tokens the re-render diff aligns; past it the diff is
/// reported as not aligned (bounded time and memory per request).
pub(super) const MAX_DIFF_EDITS: usize = 4000;

/// The recorded stream aligned with the template's full re-render of its conversation.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub(super) struct RerenderDiff {
    /// Tokens of the re-render.
    pub len: usize,
    /// Whether the alignment fit [`MAX_DIFF_EDITS`]; `runs` is empty when not.
    pub aligned: bool,
    /// Stream tokens the re-render does not have.
    pub deleted: usize,
    /// Re-render tokens the stream does not have.
    pub inserted: usize,
    /// The edit script from stream to re-render, in order: `equal` and `delete` runs walk
    /// the stream, `insert` runs carry the re-render's tokens.
    pub runs: Vec<DiffRun>,
}

/// One run of the edit script.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct DiffRun {
    /// `equal`, `delete` or `insert`.
    pub op: DiffOp,
    /// Tokens in the run.
    pub len: usize,
    /// The inserted ids (`insert` runs only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<u32>,
    /// Their text (`insert` runs, with a tokenizer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<Vec<String>>,
}

/// Aligns `stream` with `rerender` (see [`RerenderDiff`]).
pub(super) fn rerender_diff(
    stream: &[u32],
    rerender: &[u32],
    codec: Option<&Codec>,
) -> RerenderDiff {
    let mut d = RerenderDiff {
        len: rerender.len(),
        ..RerenderDiff::default()
    };
    let Some(script) = edit_script(stream, rerender, MAX_DIFF_EDITS) else {
        return d;
    };
    d.aligned = true;
    let mut j = 0;
    for (op, len) in script {
        let mut run = DiffRun {
            op,
            len,
            ids: Vec::new(),
            text: None,
        };
        match op {
            DiffOp::Equal => j += len,
            DiffOp::Delete => d.deleted += len,
            DiffOp::Insert => {
                run.ids = rerender[j..j + len].to_vec();
                run.text = codec.map(|c| token_texts(c, &run.ids).0);
                d.inserted += len;
                j += len;
            }
        }
        d.runs.push(run);
    }
    d
}
