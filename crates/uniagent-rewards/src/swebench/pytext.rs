//! The few Python `str` behaviours the package's parsers rely on, so that a line splits, strips
//! and matches exactly as it does in CPython.

/// Python's `str.isspace`: Unicode `White_Space` plus the four ASCII separators `\x1c`–`\x1f`.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `str.split()` without arguments: runs of whitespace separate, no empty words.
pub(crate) fn split(text: &str) -> Vec<&str> {
    text.split(is_py_space).filter(|w| !w.is_empty()).collect()
}

/// `str.strip()` without arguments.
pub(crate) fn strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// Python's universal newlines on reading a text file: `\r\n` and a lone `\r` become `\n`.
pub(crate) fn universal_newlines(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\r') {
        return text.into();
    }
    text.replace("\r\n", "\n").replace('\r', "\n").into()
}

/// The regex class of Python's `\s` on `str` patterns (used inside ported patterns).
pub(crate) const PY_SPACE_CLASS: &str = r"[\s\x1c-\x1f]";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_strip_follow_python() {
        assert_eq!(split("  a\u{1f}b\u{a0} c\t"), ["a", "b", "c"]);
        assert_eq!(strip("\u{1c} x \u{3000}"), "x");
        assert_eq!(universal_newlines("a\r\nb\rc\n"), "a\nb\nc\n");
    }
}
