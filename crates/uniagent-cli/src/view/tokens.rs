//! The token view of one trajectory: every prompt and response token with its text, mask,
//! source, logprob, weight version and turn, as parallel arrays (compact for long traces).
//!
//! `trajectories.jsonl` stores the mask but not where each mask-0 token came from. With a
//! tokenizer, mask-0 tokens are split into `template` (special tokens, and the rest of their
//! line: role headers, the newline after an end-of-turn) and `observation` (everything else);
//! without one they are `inserted`. A line that carries an explicit `token_sources` array
//! (one per response token) is shown as written.

use serde::Serialize;
use serde_json::Value;
use uniagent_core::codec::Codec;

/// The token view.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct TokenView {
    /// Prompt tokens (the first `prompt_len` entries of every array).
    pub prompt_len: usize,
    /// Token ids.
    pub ids: Vec<u32>,
    /// Decoded text per token (`null` without a tokenizer).
    pub text: Option<Vec<String>>,
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
    /// Whether `source` was inferred (no `token_sources` in the line).
    pub sources_inferred: bool,
}

fn ids(v: &Value, key: &str) -> Vec<u32> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0) as u32).collect())
        .unwrap_or_default()
}

/// Builds the token view of trajectory `t`, decoding with `codec` when given. Arrays that
/// are shorter than `response_ids` (a malformed line) leave `null`s, never a panic.
pub fn token_view(t: &Value, codec: Option<&Codec>) -> TokenView {
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
    if let Some(c) = codec {
        v.text = Some(
            prompt
                .iter()
                .chain(&response)
                .map(|&id| c.decode(&[id], false).unwrap_or_default())
                .collect(),
        );
    }
    for &id in &prompt {
        v.ids.push(id);
        v.mask.push(None);
        v.source.push("prompt");
        v.logprob.push(None);
        v.version.push(None);
        v.turn.push(0);
    }
    let explicit = t.get("token_sources").and_then(Value::as_array);
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
        let source = match explicit.and_then(|a| a.get(i)).and_then(Value::as_str) {
            Some(s) => known_source(s),
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
}
