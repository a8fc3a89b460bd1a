//! Splitting text on added tokens, as `tokenizers` does for tokens with no `single_word`,
//! `lstrip`, `rstrip` or `normalized` flag: leftmost-longest matches on the raw text.

/// The added tokens, indexed by their first byte.
pub(crate) struct AddedTokens {
    /// Whether some token starts with this byte.
    first: [bool; 256],
    /// `(content, id)`, longest first, so the first hit at a position is the longest.
    tokens: Vec<(Box<[u8]>, u32)>,
}

impl AddedTokens {
    pub(crate) fn new(tokens: Vec<(String, u32)>) -> Self {
        let mut tokens: Vec<(Box<[u8]>, u32)> = tokens
            .into_iter()
            .map(|(t, id)| (t.into_bytes().into_boxed_slice(), id))
            .collect();
        tokens.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let mut first = [false; 256];
        for (t, _) in &tokens {
            if let Some(&b) = t.first() {
                first[usize::from(b)] = true;
            }
        }
        Self { first, tokens }
    }

    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The first added token in `text[from..]`: `(start, end, id)`.
    pub(crate) fn find(&self, text: &str, from: usize) -> Option<(usize, usize, u32)> {
        let bytes = text.as_bytes();
        let mut i = from;
        while i < bytes.len() {
            if self.first[usize::from(bytes[i])] {
                let rest = &bytes[i..];
                if let Some((t, id)) = self.tokens.iter().find(|(t, _)| rest.starts_with(t)) {
                    return Some((i, i + t.len(), *id));
                }
            }
            i += 1;
        }
        None
    }
}
