//! The Qwen2 pre-tokenizer split, hand-written.
//!
//! The `tokenizers` `Split` (behaviour `Isolated`) runs this Oniguruma regex over each
//! normalized segment:
//!
//! ```text
//! (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! Every character starts a match of some alternative, so the matches tile the text and
//! [`split`] only has to find where the match starting at each position ends: the first
//! alternative that matches there wins, with the regex's greedy backtracking worked out per
//! alternative below.

use super::unicode_tables::{LETTER, NUMBER};

/// The character classes the regex distinguishes (`\s`, `\p{L}`, `\p{N}` are disjoint).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// Oniguruma's Unicode `\s`: U+0009–U+000D, U+0085 and the Zs, Zl, Zp categories.
    Space,
    /// Anything else.
    Other,
}

/// ASCII classes by byte, so ASCII text never searches the Unicode tables.
const ASCII: [Class; 128] = {
    let mut t = [Class::Other; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        t[b] = if c.is_ascii_alphabetic() {
            Class::Letter
        } else if c.is_ascii_digit() {
            Class::Number
        } else if (c >= 0x09 && c <= 0x0d) || c == b' ' {
            Class::Space
        } else {
            Class::Other
        };
        b += 1;
    }
    t
};

fn in_ranges(table: &[(u32, u32)], cp: u32) -> bool {
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The class of `c` under Oniguruma's Unicode 16 tables.
pub(crate) fn class(c: char) -> Class {
    let cp = c as u32;
    if cp < 128 {
        return ASCII[cp as usize];
    }
    match cp {
        0x85 | 0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029 | 0x202f | 0x205f | 0x3000 => {
            Class::Space
        }
        _ if in_ranges(&LETTER, cp) => Class::Letter,
        _ if in_ranges(&NUMBER, cp) => Class::Number,
        _ => Class::Other,
    }
}

/// The character at byte `i` of `s` and its class; `None` at the end.
#[inline]
fn at(s: &str, i: usize) -> Option<(char, Class)> {
    match s.as_bytes().get(i) {
        None => None,
        Some(&b) if b < 128 => Some((b as char, ASCII[b as usize])),
        Some(_) => s.get(i..)?.chars().next().map(|c| (c, class(c))),
    }
}

/// Calls `piece(start, end)` for each pre-token of `s`, in order; the pieces tile `s`.
pub(crate) fn split(s: &str, mut piece: impl FnMut(usize, usize)) {
    let mut p = 0;
    while let Some((c, cls)) = at(s, p) {
        let end = match_end(s, p, c, cls);
        piece(p, end);
        p = end;
    }
}

/// End of the regex match that starts at `p`, where `s[p..]` starts with `c` of class `cls`.
fn match_end(s: &str, p: usize, c: char, cls: Class) -> usize {
    let next = p + c.len_utf8();
    // (?i:'s|'t|'re|'ve|'m|'ll|'d): U+017F (long s) case-folds to `s`.
    if c == '\'' {
        if let Some(len) = contraction(s, next) {
            return next + len;
        }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+: the optional char is taken only when a letter follows it.
    if cls == Class::Letter {
        return letters_end(s, p);
    }
    if c != '\r' && c != '\n' && cls != Class::Number {
        if let Some((_, Class::Letter)) = at(s, next) {
            return letters_end(s, next);
        }
    }
    // \p{N}: one digit at a time.
    if cls == Class::Number {
        return next;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    if c == ' ' {
        if let Some((_, Class::Other)) = at(s, next) {
            return others_end(s, next);
        }
    }
    if cls == Class::Other {
        return others_end(s, p);
    }
    whitespace_end(s, p)
}

fn contraction(s: &str, i: usize) -> Option<usize> {
    let b = s.as_bytes();
    let lower = |k: usize| b.get(i + k).map(u8::to_ascii_lowercase);
    match lower(0)? {
        b's' | b't' | b'm' | b'd' => Some(1),
        b'r' | b'v' if lower(1) == Some(b'e') => Some(2),
        b'l' if lower(1) == Some(b'l') => Some(2),
        // U+017F LATIN SMALL LETTER LONG S, UTF-8 C5 BF.
        0xc5 if b.get(i + 1) == Some(&0xbf) => Some(2),
        _ => None,
    }
}

fn letters_end(s: &str, mut i: usize) -> usize {
    while let Some((c, Class::Letter)) = at(s, i) {
        i += c.len_utf8();
    }
    i
}

fn others_end(s: &str, mut i: usize) -> usize {
    while let Some((c, Class::Other)) = at(s, i) {
        i += c.len_utf8();
    }
    let b = s.as_bytes();
    while matches!(b.get(i), Some(b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+` at a whitespace character `p`.
fn whitespace_end(s: &str, p: usize) -> usize {
    let mut i = p;
    let mut last_start = p;
    let mut after_newline = None;
    while let Some((c, Class::Space)) = at(s, i) {
        last_start = i;
        i += c.len_utf8();
        if c == '\r' || c == '\n' {
            after_newline = Some(i);
        }
    }
    // \s*[\r\n]+: \s* backs off to the last newline of the run.
    if let Some(end) = after_newline {
        return end;
    }
    // \s+(?!\S): the whole run at the end of the text, else the run minus its last char.
    if i == s.len() || last_start > p {
        return if i == s.len() { i } else { last_start };
    }
    // \s+: a single whitespace char before a non-space.
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<&str> {
        let mut out = Vec::new();
        split(s, |a, b| out.push(&s[a..b]));
        out
    }

    #[test]
    fn contractions_are_case_insensitive() {
        assert_eq!(pieces("it'S"), ["it", "'S"]);
        assert_eq!(pieces("we'LL'Ve'd'x"), ["we", "'LL", "'Ve", "'d", "'x"]);
        assert_eq!(pieces("'ſo"), ["'ſ", "o"]);
        assert_eq!(pieces("'l"), ["'l"]);
    }

    #[test]
    fn whitespace_rules() {
        assert_eq!(pieces("  \n  x"), ["  \n", " ", " x"]);
        assert_eq!(pieces("a  "), ["a", "  "]);
        assert_eq!(pieces("a   b"), ["a", "  ", " b"]);
        assert_eq!(pieces(" 1"), [" ", "1"]);
        assert_eq!(pieces("\n\n \t"), ["\n\n", " \t"]);
        assert_eq!(pieces("\tx"), ["\tx"]);
        assert_eq!(pieces("\nx"), ["\n", "x"]);
    }

    #[test]
    fn digits_and_punctuation() {
        assert_eq!(pieces("12345"), ["1", "2", "3", "4", "5"]);
        assert_eq!(pieces("x٣"), ["x", "٣"]);
        assert_eq!(pieces("a ...\n\nb"), ["a", " ...\n\n", "b"]);
        assert_eq!(pieces("{\"k\": 1}"), ["{\"", "k", "\":", " ", "1", "}"]);
        assert_eq!(pieces(" \u{301}x"), [" \u{301}", "x"]);
    }

    #[test]
    fn unicode_classes_follow_oniguruma() {
        assert_eq!(class('\u{85}'), Class::Space);
        assert_eq!(class('\u{2028}'), Class::Space);
        assert_eq!(class('\u{180e}'), Class::Other);
        assert_eq!(class('\u{200b}'), Class::Other);
        assert_eq!(class('\u{feff}'), Class::Other);
        assert_eq!(class('\u{1c}'), Class::Other);
        assert_eq!(class('中'), Class::Letter);
        assert_eq!(class('Ⅻ'), Class::Number);
        assert_eq!(class('\u{301}'), Class::Other);
    }
}
