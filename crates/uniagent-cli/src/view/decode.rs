//! Per-token text that never splits a character: byte-level tokenizers cut multi-byte UTF-8
//! characters across tokens, and decoding such a token alone gives U+FFFD. Tokens are decoded
//! as a stream instead (each token's text is what it adds to the decoded text, with a few
//! earlier tokens as context for tokenizers that strip a leading space): a token holding only
//! the leading bytes of a character gets empty text and is listed as partial, and the token
//! that completes the character carries all of it.

use uniagent_core::codec::Codec;

/// The most tokens one character can span (four UTF-8 bytes).
const MAX_PENDING: usize = 4;

/// The text of every token of `ids` and the indices of the partial ones (their character is
/// shown on the next non-partial token). Concatenated, the texts equal the decoded stream.
pub(super) fn token_texts(codec: &Codec, ids: &[u32]) -> (Vec<String>, Vec<usize>) {
    let decode = |range: &[u32]| codec.decode(range, false).unwrap_or_default();
    let mut texts = Vec::with_capacity(ids.len());
    let mut partial = Vec::new();
    // `ids[prefix..read]`: context already shown; `ids[read..]`: not shown yet.
    let (mut prefix, mut read) = (0usize, 0usize);
    for i in 0..ids.len() {
        let shown = decode(&ids[prefix..read]);
        let now = decode(&ids[prefix..=i]);
        let pending = i + 1 - read;
        if now.ends_with('\u{FFFD}') && pending < MAX_PENDING && i + 1 < ids.len() {
            texts.push(String::new());
            partial.push(i);
            continue;
        }
        let text = match now.strip_prefix(shown.as_str()) {
            Some(new) => new.to_owned(),
            None => decode(&ids[read..=i]),
        };
        texts.push(text);
        (prefix, read) = (read, i + 1);
    }
    (texts, partial)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3() -> Codec {
        Codec::from_dir(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../uniagent-core/tests/fixtures/tokenizers/qwen3"),
        )
        .unwrap()
    }

    #[test]
    fn split_characters_are_shown_whole_on_their_last_token() {
        let codec = qwen3();
        let text = "a 😀 b 中文字 𝔘𝔫𝔦 ꙮ 𠀀 ok\n<|im_end|>";
        let ids = codec.encode(text).unwrap();
        // The fixture's byte-level BPE really splits some of these characters.
        let alone: Vec<String> = ids
            .iter()
            .map(|id| codec.decode(&[*id], false).unwrap())
            .collect();
        assert!(alone.iter().any(|t| t.contains('\u{FFFD}')), "{alone:?}");
        let (texts, partial) = token_texts(&codec, &ids);
        assert_eq!(texts.concat(), text);
        assert!(!partial.is_empty());
        assert!(texts.iter().all(|t| !t.contains('\u{FFFD}')), "{texts:?}");
        for &i in &partial {
            assert!(texts[i].is_empty() && i + 1 < ids.len());
        }
        assert!(texts.contains(&"<|im_end|>".to_owned()));
    }

    #[test]
    fn an_unfinished_character_at_the_end_is_shown_as_decoded() {
        let codec = qwen3();
        let ids = codec.encode("x𝔘").unwrap();
        let cut = &ids[..ids.len() - 1];
        let (texts, partial) = token_texts(&codec, cut);
        assert_eq!(texts.len(), cut.len());
        assert_eq!(texts[0], "x");
        assert!(partial.iter().all(|&i| i + 1 < cut.len()));
    }
}
