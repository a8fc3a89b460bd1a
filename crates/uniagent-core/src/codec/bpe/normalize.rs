//! NFC with the offsets `tokenizers` reports.
//!
//! `tokenizers` normalizes each segment between added tokens with
//! `unicode-normalization-alignments` and tracks, for every normalized byte, the original
//! byte range it came from. The same crate is used here and the alignment bookkeeping follows
//! `NormalizedString::transform`'s rules: a replaced char takes the range of the input char
//! it replaces, an inserted char the range of the input byte before it, and a char that
//! absorbs following chars (a composition) the range of its first input char only.

use std::borrow::Cow;

use unicode_normalization_alignments::{is_nfc_quick, IsNormalized, UnicodeNormalization};

/// A normalized segment and where its bytes come from in the original text.
pub(crate) struct Normalized<'a> {
    /// The NFC text.
    pub(crate) text: Cow<'a, str>,
    /// Original byte range of each normalized byte; `None` when the text is unchanged (each
    /// byte maps to the range of the char it belongs to).
    pub(crate) align: Option<Vec<(usize, usize)>>,
    /// Byte offset of the segment in the original text.
    pub(crate) base: usize,
}

impl Normalized<'_> {
    /// Original offsets of normalized bytes `start..end` (non-empty): the range of the char
    /// holding the first byte to the end of the char holding the last.
    pub(crate) fn original(&self, start: usize, end: usize) -> (usize, usize) {
        match &self.align {
            Some(a) => (a[start].0, a[end - 1].1),
            None => {
                let b = self.text.as_bytes();
                let mut s = start;
                while s > 0 && is_continuation(b[s]) {
                    s -= 1;
                }
                let mut e = end;
                while e < b.len() && is_continuation(b[e]) {
                    e += 1;
                }
                (self.base + s, self.base + e)
            }
        }
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xc0 == 0x80
}

/// NFC of `seg`, which starts at byte `base` of the original text. ASCII and text the quick
/// check proves normalized are borrowed as they are.
pub(crate) fn nfc(seg: &str, base: usize) -> Normalized<'_> {
    if seg.is_ascii() || is_nfc_quick(seg.chars()) == IsNormalized::Yes {
        return Normalized {
            text: Cow::Borrowed(seg),
            align: None,
            base,
        };
    }
    let range_at = |pos: usize, ch: char| (base + pos, base + pos + ch.len_utf8());
    let mut input = seg.char_indices().peekable();
    // The original range of the last input byte consumed, for inserted chars.
    let mut previous = (base, base);
    let mut text = String::with_capacity(seg.len() + 8);
    let mut align = Vec::with_capacity(seg.len() + 8);
    for (c, change) in seg.nfc() {
        let range = if change > 0 {
            previous
        } else {
            let Some((pos, ch)) = input.next() else {
                break;
            };
            previous = range_at(pos, ch);
            for _ in 0..change.unsigned_abs() {
                if let Some((pos, ch)) = input.next() {
                    previous = range_at(pos, ch);
                }
            }
            range_at(pos, ch)
        };
        text.push(c);
        align.extend(std::iter::repeat_n(range, c.len_utf8()));
    }
    Normalized {
        text: Cow::Owned(text),
        align: Some(align),
        base,
    }
}
