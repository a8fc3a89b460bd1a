//! A hand-written encoder for Qwen2-family byte-level BPE tokenizers, equal to
//! `tokenizers`' `encode(text, add_special_tokens=false)` in ids and byte offsets.
//!
//! The pipeline is `tokenizers`' own: split the raw text on added tokens
//! ([`added`]), NFC-normalize the rest ([`normalize`]), cut it into pre-tokens with the
//! Qwen2 regex ([`pretokenize`]) and merge each pre-token's bytes ([`merge`]). It skips what
//! `tokenizers` spends most of its time on: the Oniguruma regex, the byte-to-alphabet string
//! mapping, per-piece `NormalizedString`s and building an `Encoding`. Only the exact
//! tokenizer shape of [`load`] gets one; the codec falls back to `tokenizers` otherwise.

mod added;
mod load;
mod merge;
mod normalize;
mod pretokenize;
mod unicode_tables;

use super::Offsets;

/// The fast encoder (see the module docs).
pub(crate) struct FastBpe {
    added: added::AddedTokens,
    merges: std::sync::Arc<merge::Merges>,
}

impl std::fmt::Debug for FastBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastBpe")
            .field("added_tokens", &self.added.len())
            .field("merges", &self.merges.ranks.len())
            .field("cached_words", &self.merges.cached_words())
            .finish()
    }
}

impl FastBpe {
    /// Token ids of `text`, and their byte offsets in `text` when `offsets` is given.
    pub(crate) fn encode(&self, text: &str, mut offsets: Option<&mut Vec<Offsets>>) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        let mut from = 0;
        while from < text.len() {
            let (seg_end, token) = match self.added.find(text, from) {
                Some((start, end, id)) => (start, Some((start, end, id))),
                None => (text.len(), None),
            };
            if seg_end > from {
                self.segment(text, from, seg_end, &mut ids, offsets.as_deref_mut());
            }
            let Some((start, end, id)) = token else { break };
            ids.push(id);
            if let Some(o) = offsets.as_deref_mut() {
                o.push((start, end));
            }
            from = end;
        }
        ids
    }

    /// Encodes `text[start..end]`, a stretch without added tokens.
    fn segment(
        &self,
        text: &str,
        start: usize,
        end: usize,
        ids: &mut Vec<u32>,
        mut offsets: Option<&mut Vec<Offsets>>,
    ) {
        let Some(seg) = text.get(start..end) else {
            return;
        };
        let norm = normalize::nfc(seg, start);
        let s: &str = &norm.text;
        pretokenize::split(s, |a, b| {
            let first = ids.len();
            self.merges.word(&s.as_bytes()[a..b], ids);
            if let Some(o) = offsets.as_deref_mut() {
                let mut pos = a;
                for &id in &ids[first..] {
                    let len = self.merges.token_len.get(id as usize).copied().unwrap_or(0);
                    let next = (pos + len as usize).min(b);
                    o.push(norm.original(pos, next.max(pos + 1)));
                    pos = next;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3() -> (tokenizers::Tokenizer, FastBpe) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tokenizers/qwen3/tokenizer.json"
        );
        let tokenizer = tokenizers::Tokenizer::from_file(path).unwrap();
        let fast = FastBpe::from_tokenizer(&tokenizer).expect("qwen3 is recognised");
        (tokenizer, fast)
    }

    fn check(tokenizer: &tokenizers::Tokenizer, fast: &FastBpe, text: &str) {
        let want = tokenizer.encode(text, false).unwrap();
        let mut offsets = Vec::new();
        let ids = fast.encode(text, Some(&mut offsets));
        assert_eq!(ids, want.get_ids(), "ids of {text:?}");
        assert_eq!(offsets, want.get_offsets(), "offsets of {text:?}");
        assert_eq!(
            fast.encode(text, None),
            ids,
            "ids without offsets of {text:?}"
        );
    }

    #[test]
    fn tricky_texts_match_tokenizers() {
        let (tokenizer, fast) = qwen3();
        for text in [
            "",
            "  \n  x",
            "trailing   ",
            "IT'S 'LL 'Ve 'ſ",
            "12345 ٣٤ Ⅻ",
            "a...!!\n\n\nb",
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
            "<tool_call>\n{\"name\": \"f\"}\n</tool_call><|im_end|",
            "caf\u{65}\u{301} café 😀👍🏽 中文 한국어",
            "\u{212b}\u{958}x\u{1e9b}\u{323}",
            "\u{85}\u{2028}\u{feff}\u{200b}\u{180e} x",
        ] {
            check(&tokenizer, &fast, text);
        }
    }

    #[test]
    fn long_words_merge_like_tokenizers() {
        let (tokenizer, fast) = qwen3();
        check(&tokenizer, &fast, &"ab".repeat(300));
        check(&tokenizer, &fast, &" ".repeat(200));
        check(&tokenizer, &fast, &"=-".repeat(120));
        check(&tokenizer, &fast, &"é".repeat(100));
    }
}
