//! The token view of one trajectory: every prompt and response token with its text, mask,
//! source, logprob, weight version and turn, as parallel arrays (compact for long traces),
//! and, when the writer recorded the template's full re-render (`rerender_ids`), the
//! alignment of the stream with it.
//!
//! Sources come from the line's `token_sources` when the writer recorded them (run-length
//! encoded over prompt and response, as the rollout cache knew them; an older per-response
//! list of names is read too). Otherwise they are inferred: with a tokenizer, mask-0 tokens
//! are split into `template` (special tokens, and the rest of their line: role headers, the
//! newline after an end-of-turn) and `observation` (everything else); without one they are
//! `inserted`.

use serde::Serialize;
use serde_json::Value;
use uniagent_core::codec::Codec;
use uniagent_core::TokenSourceRuns;

use super::decode::token_texts;
use super::rerender::{rerender_diff, RerenderDiff};

/// The token view.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub(super) struct TokenView {
    /// Prompt tokens (the first `prompt_len` entries of every array).
    pub prompt_len: usize,
    /// Token ids.
    pub ids: Vec<u32>,
    /// Text per token, decoded as a stream so that a character split across tokens is shown
    /// whole on its last token (`null` without a tokenizer).
    pub text: Option<Vec<String>>,
    /// Tokens holding only the leading bytes of a character (their `text` is empty).
    pub partial: Vec<usize>,
    /// Response mask (`null` on prompt tokens).
    pub mask: Vec<Option<u8>>,
    /// `prompt`, `sampled`, `template`, `observation` or `inserted`.
    pub source: Vec<&'static str>,
    /// Logprob (`null` where none was recorded or on prompt tokens).
    pub logprob: Vec<Option<f32>>,
    /// Weight version of the policy that sampled the token.
    pub version: Vec<Option<u64>>,
    /// Assistant turn the token belongs to or follows (prompt tokens: 0).
    pub turn: Vec<u32>,
    /// Indices where a sampled turn starts (turn boundaries).
    pub turn_starts: Vec<usize>,
    /// Whether `source` was inferred (no usable `token_sources` in the line).
    pub sources_inferred: bool,
    /// The stream against the template's full re-render, when the line has `rerender_ids`.
    pub rerender: Option<RerenderDiff>,
}

fn ids(v: &Value, key: &str) -> Vec<u32> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0) as u32).collect())
        .unwrap_or_default()
}

/// Builds the token view of trajectory `t`, decoding with `codec` when given. Arrays that
/// are shorter than `response_ids` (a malformed line) leave `null`s, never a panic.
pub(super) fn token_view(t: &Value, codec: Option<&Codec>) -> TokenView {
    let prompt = ids(t, "prompt_ids");
    let response = ids(t, "response_ids");
    let at = |key: &str, i: usize| t.get(key).and_then(Value::as_array).and_then(|a| a.get(i));
    let mut v = TokenView {
        prompt_len: prompt.len(),
        ..TokenView::default()
    };
    // Built once: the tokenizer makes a fresh map on every call.
    let specials: std::collections::HashSet<u32> = codec
        .map(|c| {
            let added = c.tokenizer().get_added_tokens_decoder();
            added
                .into_iter()
                .filter(|(_, t)| t.special)
                .map(|(id, _)| id)
                .collect()
        })
        .unwrap_or_default();
    let special: Vec<bool> = prompt
        .iter()
        .chain(&response)
        .map(|id| specials.contains(id))
        .collect();
    let all: Vec<u32> = prompt.iter().chain(&response).copied().collect();
    if let Some(c) = codec {
        let (text, partial) = token_texts(c, &all);
        v.text = Some(text);
        v.partial = partial;
    }
    if let Some(rerender) = t.get("rerender_ids").and_then(Value::as_array) {
        let rerender: Vec<u32> = rerender
            .iter()
            .map(|x| x.as_u64().unwrap_or(0) as u32)
            .collect();
        v.rerender = Some(rerender_diff(&all, &rerender, codec));
    }
    for &id in &prompt {
        v.ids.push(id);
        v.mask.push(None);
        v.source.push("prompt");
        v.logprob.push(None);
        v.version.push(None);
        v.turn.push(0);
    }
    let explicit = recorded_sources(t, all.len());
    v.sources_inferred = explicit.is_none();
    let (mut turn, mut prev_sampled, mut seen_sampled) = (0u32, false, false);
    // Inside a mask-0 run: whether the current line began at a special token.
    let mut in_template_line = false;
    for (i, &id) in response.iter().enumerate() {
        let k = prompt.len() + i;
        let mask = at("response_mask", i)
            .and_then(Value::as_u64)
            .map(|m| m.min(1) as u8);
        let sampled = mask == Some(1);
        if sampled && !prev_sampled {
            if seen_sampled {
                turn += 1;
            }
            seen_sampled = true;
            v.turn_starts.push(k);
        }
        prev_sampled = sampled;
        let source = match explicit.as_ref().and_then(|a| a.get(i)).copied() {
            Some(s) => s,
            None if sampled => "sampled",
            None if codec.is_none() => "inserted",
            None => {
                let text = v
                    .text
                    .as_ref()
                    .and_then(|t| t.get(k))
                    .map_or("", String::as_str);
                if special[k] {
                    in_template_line = !text.ends_with('\n');
                    "template"
                } else if in_template_line || (i > 0 && special[k - 1] && text.trim().is_empty()) {
                    in_template_line = !text.contains('\n');
                    "template"
                } else {
                    "observation"
                }
            }
        };
        if sampled {
            in_template_line = false;
        }
        v.ids.push(id);
        v.mask.push(mask);
        v.source.push(source);
        v.logprob.push(
            at("response_logprobs", i)
                .and_then(Value::as_f64)
                .map(|x| x as f32),
        );
        v.version
            .push(at("weight_versions", i).and_then(Value::as_u64));
        v.turn.push(turn);
    }
    v
}

/// The recorded source name of every response token: the run-length encoded
/// `token_sources` over prompt and response (when it covers exactly `total` tokens), or an
/// older list with one name per response token. `None` when absent or unusable.
fn recorded_sources(t: &Value, total: usize) -> Option<Vec<&'static str>> {
    let recorded = t.get("token_sources")?;
    let prompt = t
        .get("prompt_ids")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if let Ok(runs) = serde_json::from_value::<TokenSourceRuns>(recorded.clone()) {
        if runs.len() != total {
            return None;
        }
        return Some(
            runs.expand()
                .iter()
                .skip(prompt)
                .map(|s| s.label())
                .collect(),
        );
    }
    let names = recorded.as_array()?;
    names.iter().map(|s| s.as_str().map(known_source)).collect()
}

fn known_source(s: &str) -> &'static str {
    match s {
        "sampled" => "sampled",
        "template" => "template",
        "observation" => "observation",
        "prompt" => "prompt",
        _ => "inserted",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::view::diff::DiffOp;
    use crate::view::rerender::MAX_DIFF_EDITS;

    #[test]
    fn turns_sources_and_short_arrays() {
        let t = json!({
            "prompt_ids": [1, 2],
            "response_ids": [10, 11, 12, 13, 14, 15],
            "response_mask": [1, 1, 0, 0, 1],
            "response_logprobs": [-0.5, -1.0, 0.0, 0.0, -2.0, 0.0],
            "weight_versions": [3, 3, null, null, 4],
        });
        let v = token_view(&t, None);
        assert_eq!(v.prompt_len, 2);
        assert_eq!(v.ids.len(), 8);
        assert_eq!(
            v.source,
            [
                "prompt", "prompt", "sampled", "sampled", "inserted", "inserted", "sampled",
                "inserted"
            ]
        );
        assert_eq!(v.turn, [0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(v.turn_starts, [2, 6]);
        assert_eq!(v.version[6], Some(4));
        assert_eq!(v.mask[7], None, "mask shorter than the ids");
        assert_eq!(v.logprob[2], Some(-0.5));
        assert!(v.text.is_none() && v.sources_inferred);
    }

    #[test]
    fn recorded_sources_and_the_rerender_diff() {
        let mut t = json!({
            "prompt_ids": [1, 2],
            "response_ids": [10, 11, 12, 13],
            "response_mask": [1, 0, 0, 1],
            "token_sources": [["prompt", 2], ["sampled", 1], ["template", 1], ["observation", 1], ["sampled", 1]],
            "rerender_ids": [1, 2, 10, 99, 13],
        });
        let v = token_view(&t, None);
        assert!(!v.sources_inferred);
        assert_eq!(
            v.source,
            [
                "prompt",
                "prompt",
                "sampled",
                "template",
                "observation",
                "sampled"
            ]
        );
        let d = v.rerender.unwrap();
        assert!(d.aligned);
        assert_eq!((d.len, d.deleted, d.inserted), (5, 2, 1));
        let ops: Vec<(DiffOp, usize)> = d.runs.iter().map(|r| (r.op, r.len)).collect();
        assert_eq!(ops.first(), Some(&(DiffOp::Equal, 3)));
        assert_eq!(ops.last(), Some(&(DiffOp::Equal, 1)));
        let insert = d.runs.iter().find(|r| r.op == DiffOp::Insert).unwrap();
        assert_eq!(insert.ids, [99]);
        assert!(insert.text.is_none(), "no tokenizer, no text");
        // Sources that do not cover every token are not trusted.
        t["token_sources"] = json!([["prompt", 2], ["sampled", 1]]);
        assert!(token_view(&t, None).sources_inferred);
        // Too different to align within the bound: reported, not computed.
        let far: Vec<u32> = (0..MAX_DIFF_EDITS as u32).collect();
        let d = rerender_diff(&far, &[u32::MAX], None);
        assert!(!d.aligned && d.runs.is_empty());
    }
}
