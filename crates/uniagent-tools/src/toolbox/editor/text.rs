//! Text helpers of the editor: binary detection, line arithmetic and `cat -n` numbering.
//!
//! Edits work on the exact bytes of a file; these helpers only *look* at lines, so tabs, CRLF,
//! a missing trailing newline and any Unicode survive untouched.

use super::EditorError;

/// The file as text, or a clear refusal when it is binary (a NUL byte or invalid UTF-8).
pub fn as_text<'a>(path: &str, bytes: &'a [u8]) -> Result<&'a str, EditorError> {
    if let Some(pos) = bytes.iter().position(|&b| b == 0) {
        return Err(EditorError::new(format!(
            "{path} is a binary file (it contains a NUL byte at offset {pos}); str_replace_editor only \
             views and edits text files. Use execute_bash (e.g. `xxd`, `file`) to inspect it."
        )));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        EditorError::new(format!(
            "{path} is not UTF-8 text (invalid byte sequence at offset {}); str_replace_editor only \
             views and edits UTF-8 text files. Use execute_bash (e.g. `iconv`, `xxd`) instead.",
            e.valid_up_to()
        ))
    })
}

/// The byte offset where each line starts. A trailing newline does not start another line;
/// the empty text has no lines.
pub fn line_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    if text.is_empty() {
        return starts;
    }
    starts.push(0);
    starts.extend(
        text.match_indices('\n')
            .map(|(i, _)| i + 1)
            .filter(|&i| i < text.len()),
    );
    starts
}

/// The 1-based line holding byte `offset`.
pub fn line_of(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).max(1)
}

/// The lines of `text` without their terminators (`\n` or `\r\n`).
pub fn display_lines(text: &str) -> Vec<&str> {
    let starts = line_starts(text);
    starts
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let end = starts.get(i + 1).copied().unwrap_or(text.len());
            let line = &text[start..end];
            let line = line.strip_suffix('\n').unwrap_or(line);
            line.strip_suffix('\r').unwrap_or(line)
        })
        .collect()
}

/// `cat -n` numbering: each line as `{number:6}\t{line}\n`, starting at `first`.
pub fn number_lines(lines: &[&str], first: usize) -> String {
    let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 8).sum());
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&format!("{:6}\t{line}\n", first + i));
    }
    out
}

/// The line terminator the file uses: `\r\n` when its first line ends with one, else `\n`.
pub fn line_ending(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// `text` with bare `\n` turned into `\r\n` (for text written into a CRLF file).
pub fn to_crlf(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut previous = '\0';
    for c in text.chars() {
        if c == '\n' && previous != '\r' {
            out.push('\r');
        }
        out.push(c);
        previous = c;
    }
    out
}

/// Every byte offset where `needle` starts in `haystack`, overlapping matches included (so
/// "unique" really means one place).
pub fn match_offsets(haystack: &str, needle: &str) -> Vec<usize> {
    if needle.is_empty() {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = haystack.get(from..).and_then(|rest| rest.find(needle)) {
        found.push(from + i);
        // Step one character, not one match, to see overlaps.
        from += i + haystack[from + i..]
            .chars()
            .next()
            .map_or(1, char::len_utf8);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_and_without_trailing_newline() {
        assert_eq!(line_starts(""), Vec::<usize>::new());
        assert_eq!(line_starts("a\nb"), vec![0, 2]);
        assert_eq!(line_starts("a\nb\n"), vec![0, 2]);
        assert_eq!(line_starts("\n\n"), vec![0, 1]);
        assert_eq!(display_lines("a\r\n\tb\r\nc"), vec!["a", "\tb", "c"]);
        assert_eq!(line_of(&[0, 2, 5], 0), 1);
        assert_eq!(line_of(&[0, 2, 5], 2), 2);
        assert_eq!(line_of(&[0, 2, 5], 9), 3);
    }

    #[test]
    fn overlapping_matches_are_counted() {
        assert_eq!(match_offsets("aaa", "aa"), vec![0, 1]);
        assert_eq!(match_offsets("éaéa", "a"), vec![2, 5]);
        assert_eq!(match_offsets("abc", ""), Vec::<usize>::new());
    }

    #[test]
    fn crlf_conversion_leaves_existing_crlf() {
        assert_eq!(to_crlf("a\nb\r\nc"), "a\r\nb\r\nc");
        assert_eq!(line_ending("x\r\ny\n"), "\r\n");
        assert_eq!(line_ending("x\ny\r\n"), "\n");
    }

    #[test]
    fn binary_and_non_utf8_are_refused() {
        assert!(as_text("/f", b"ab\0c")
            .unwrap_err()
            .message
            .contains("binary"));
        assert!(as_text("/f", b"caf\xe9")
            .unwrap_err()
            .message
            .contains("not UTF-8"));
        assert_eq!(
            as_text("/f", "ünï\tcode\r\n".as_bytes()).unwrap(),
            "ünï\tcode\r\n"
        );
    }
}
