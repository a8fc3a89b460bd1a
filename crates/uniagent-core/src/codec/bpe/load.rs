//! Recognising a Qwen2-style tokenizer and building the fast encoder from it.
//!
//! Only one exact shape is accepted; for anything else [`FastBpe::from_tokenizer`] returns
//! `None` and the codec keeps using `tokenizers`.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{json, Value};
use tokenizers::{ModelWrapper, Tokenizer};

use super::added::AddedTokens;
use super::merge::{FxMap, Merges};
use super::FastBpe;

/// The Qwen2 pre-tokenizer regex.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The BPE model as `tokenizers` serializes it; strings are borrowed from the JSON where
/// they have no escapes (loading is dominated by the 150 k vocab and merge strings).
#[derive(Deserialize)]
struct BpeModel<'a> {
    #[serde(rename = "type")]
    kind: String,
    dropout: Option<f32>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
    end_of_word_suffix: Option<String>,
    byte_fallback: bool,
    ignore_merges: bool,
    #[serde(borrow)]
    vocab: FxMap<Text<'a>, u32>,
    #[serde(borrow)]
    merges: Vec<(Text<'a>, Text<'a>)>,
}

/// A JSON string, borrowed unless it has escapes (serde's `Cow` always copies when nested).
#[derive(PartialEq, Eq, Hash)]
struct Text<'a>(Cow<'a, str>);

impl std::borrow::Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// The GPT-2 byte-level alphabet: printable Latin-1 bytes stand for themselves, the others
/// are mapped to U+0100 onwards in byte order.
fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let b = b as u32;
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        let cp = if printable {
            b
        } else {
            shifted += 1;
            255 + shifted
        };
        *slot = char::from_u32(cp).unwrap_or('\0');
    }
    table
}

fn to_value<T: serde::Serialize>(part: Option<&T>) -> Option<Value> {
    part.map(serde_json::to_value)
        .transpose()
        .ok()
        .map(|v| v.unwrap_or(Value::Null))
}

/// Whether normalizer, pre-tokenizer and post-processor are exactly Qwen2's.
fn pipeline_matches(tokenizer: &Tokenizer) -> bool {
    let normalizer = to_value(tokenizer.get_normalizer());
    let pre = to_value(tokenizer.get_pre_tokenizer());
    let post = to_value(tokenizer.get_post_processor());
    let expected_pre = json!({
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        ],
    });
    // The byte-level pre-tokenizer's `trim_offsets` plays no part in pre-tokenization.
    let pre_ok = pre.is_some_and(|mut p| {
        if let Some(t) = p.pointer_mut("/pretokenizers/1/trim_offsets") {
            *t = Value::Bool(false);
        }
        p == expected_pre
    });
    // A byte-level post-processor only trims offsets, and only with `trim_offsets`.
    let post_ok = match post {
        Some(Value::Null) => true,
        Some(p) => {
            p.get("type") == Some(&json!("ByteLevel"))
                && p.get("trim_offsets") == Some(&json!(false))
        }
        None => false,
    };
    normalizer == Some(json!({"type": "NFC"}))
        && pre_ok
        && post_ok
        && tokenizer.get_truncation().is_none()
        && tokenizer.get_padding().is_none()
        && !tokenizer.get_encode_special_tokens()
}

fn added_tokens(tokenizer: &Tokenizer) -> Option<AddedTokens> {
    let mut tokens = Vec::new();
    for (id, t) in tokenizer.get_added_tokens_decoder() {
        // Only plain tokens matched on the raw text are reproduced.
        if t.single_word || t.lstrip || t.rstrip || t.normalized || t.content.is_empty() {
            return None;
        }
        tokens.push((t.content, id));
    }
    // Two ids for one content would need `tokenizers`' tie-breaking; not reproduced.
    let mut contents: Vec<&str> = tokens.iter().map(|(c, _)| c.as_str()).collect();
    contents.sort_unstable();
    if contents.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    Some(AddedTokens::new(tokens))
}

fn merges(model: BpeModel<'_>) -> Option<Merges> {
    let plain = model.kind == "BPE"
        && model.dropout.is_none_or(|d| d == 0.0)
        && model.unk_token.is_none()
        && model
            .continuing_subword_prefix
            .as_deref()
            .unwrap_or("")
            .is_empty()
        && model.end_of_word_suffix.as_deref().unwrap_or("").is_empty()
        && !model.byte_fallback
        && !model.ignore_merges;
    if !plain {
        return None;
    }
    let chars = byte_chars();
    let mut byte_ids = [0u32; 256];
    for (slot, c) in byte_ids.iter_mut().zip(chars) {
        // Without unk or byte fallback `tokenizers` drops a byte missing from the vocab.
        *slot = *model.vocab.get(c.encode_utf8(&mut [0; 4]) as &str)?;
    }
    // The alphabet's code points are all below U+0144.
    let mut in_alphabet = [false; 0x144];
    for c in chars {
        if let Some(slot) = in_alphabet.get_mut(c as usize) {
            *slot = true;
        }
    }
    let max_id = model.vocab.values().copied().max().unwrap_or(0) as usize;
    let mut token_len = vec![0u32; max_id + 1];
    for (token, &id) in &model.vocab {
        let mut len = 0;
        for c in token.0.chars() {
            if !in_alphabet.get(c as usize).copied().unwrap_or(false) {
                len = 0;
                break;
            }
            len += 1;
        }
        token_len[id as usize] = len;
    }
    let mut ranks = FxMap::default();
    ranks.reserve(model.merges.len());
    let mut joined = String::new();
    for (rank, (a, b)) in model.merges.iter().enumerate() {
        let left = *model.vocab.get(&*a.0)?;
        let right = *model.vocab.get(&*b.0)?;
        joined.clear();
        joined.push_str(&a.0);
        joined.push_str(&b.0);
        let merged = *model.vocab.get(joined.as_str())?;
        let key = (u64::from(left) << 32) | u64::from(right);
        ranks.insert(key, (rank as u32, merged));
    }
    Some(Merges::new(byte_ids, ranks, token_len))
}

/// Models already built, with the model each came from: codecs are often built many times
/// from one tokenizer (a codec per chat template), and building costs more than loading
/// `tokenizer.json`. `ModelWrapper`'s equality compares vocab and merges exactly.
static BUILT: Mutex<Vec<(ModelWrapper, Arc<Merges>)>> = Mutex::new(Vec::new());
/// How many built models [`BUILT`] keeps.
const BUILT_MAX: usize = 2;

fn shared_merges(tokenizer: &Tokenizer) -> Option<Arc<Merges>> {
    let model = tokenizer.get_model();
    if let Ok(built) = BUILT.lock() {
        if let Some((_, merges)) = built.iter().find(|(m, _)| m == model) {
            return Some(Arc::clone(merges));
        }
    }
    // The merge ranks are private to `tokenizers`; its serialization lists them in order.
    let text = serde_json::to_string(model).ok()?;
    let parsed: BpeModel<'_> = serde_json::from_str(&text).ok()?;
    let merges = Arc::new(merges(parsed)?);
    if let Ok(mut built) = BUILT.lock() {
        if built.len() >= BUILT_MAX {
            built.remove(0);
        }
        built.push((model.clone(), Arc::clone(&merges)));
    }
    Some(merges)
}

impl FastBpe {
    /// The fast encoder for a Qwen2-style byte-level BPE tokenizer, or `None` when
    /// `tokenizer` is anything else.
    pub(crate) fn from_tokenizer(tokenizer: &Tokenizer) -> Option<Self> {
        if !pipeline_matches(tokenizer) {
            return None;
        }
        Some(Self {
            added: added_tokens(tokenizer)?,
            merges: shared_merges(tokenizer)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_is_gpt2s() {
        let t = byte_chars();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0], 'Ā');
        assert_eq!(t[0xad], '\u{143}');
    }
}
