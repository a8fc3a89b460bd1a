//! Output truncation that keeps the head and the tail, with a marker saying what was cut.
//!
//! Lengths count Unicode scalar values (characters), so a cut never splits a UTF-8 sequence.

use std::borrow::Cow;

/// The marker put where text was removed.
pub fn elision_marker(elided: usize) -> String {
    format!("\n<response clipped: {elided} characters elided from the middle>\n")
}

/// Keeps at most `max_chars` characters of `text`: its first half and its last half, joined by
/// [`elision_marker`]. Text that fits comes back unchanged (borrowed).
///
/// ```
/// use uniagent_tools::toolbox::truncate::truncate_middle;
/// let out = truncate_middle("héllo wörld", 4);
/// assert_eq!(out, "hé\n<response clipped: 7 characters elided from the middle>\nld");
/// assert_eq!(truncate_middle("short", 10), "short");
/// ```
pub fn truncate_middle(text: &str, max_chars: usize) -> Cow<'_, str> {
    let total = text.chars().count();
    if total <= max_chars {
        return Cow::Borrowed(text);
    }
    let head_chars = max_chars / 2;
    let tail_chars = max_chars - head_chars;
    let head_end = text
        .char_indices()
        .nth(head_chars)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = if tail_chars == 0 {
        text.len()
    } else {
        text.char_indices()
            .nth_back(tail_chars - 1)
            .map_or(0, |(i, _)| i)
    };
    let mut out = String::with_capacity(head_end + (text.len() - tail_start) + 64);
    out.push_str(&text[..head_end]);
    out.push_str(&elision_marker(total - max_chars));
    out.push_str(&text[tail_start..]);
    Cow::Owned(out)
}

/// Keeps at most `max_chars` characters from the start of `text`, followed by `note` when
/// something was cut.
pub fn truncate_head<'a>(text: &'a str, max_chars: usize, note: &str) -> Cow<'a, str> {
    match text.char_indices().nth(max_chars) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => Cow::Owned(format!("{}{note}", &text[..cut])),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn keeps_exactly_head_and_tail(text in "\\PC{0,200}", max in 0usize..150) {
            let out = truncate_middle(&text, max);
            let chars: Vec<char> = text.chars().collect();
            if chars.len() <= max {
                prop_assert_eq!(out.as_ref(), text.as_str());
            } else {
                let head: String = chars[..max / 2].iter().collect();
                let tail: String = chars[chars.len() - (max - max / 2)..].iter().collect();
                let expected = format!("{head}{}{tail}", elision_marker(chars.len() - max));
                prop_assert_eq!(out.as_ref(), expected.as_str());
            }
        }
    }

    #[test]
    fn head_truncation_appends_the_note() {
        assert_eq!(truncate_head("abcdef", 3, "<cut>"), "abc<cut>");
        assert_eq!(truncate_head("abc", 3, "<cut>"), "abc");
        assert_eq!(truncate_head("ääää", 2, "!"), "ää!");
    }
}
