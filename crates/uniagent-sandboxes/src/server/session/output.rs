//! What a session's pty produces, turned into SWE-ReX's `output`: the prompt marker that ends a
//! command (and carries its exit code), ANSI-escape removal, CRLF → LF, the output limit with its
//! truncation marker, and Python's `backslashreplace` decoding of bytes that are not UTF-8.

use std::sync::LazyLock;

use regex::bytes::Regex;

use crate::server::pyfmt::decode_backslashreplace;

/// SWE-ReX's escape-sequence pattern (`\x1B[@-_][0-?]*[ -/]*[@-~]`).
static ANSI_ESCAPE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?-u)\x1B[@-_][0-?]*[ -/]*[@-~]").ok());

/// The prompt marker of one session: `__UA<nonce>_<seq>_<exit code>__`.
///
/// The nonce is random per session, so command output cannot produce a marker by accident; the
/// sequence number ties a prompt to the command that produced it, so stale prompts (after an
/// interrupt, say) are never taken for the end of a later command.
#[derive(Debug, Clone)]
pub struct PromptMarker {
    nonce: String,
    regex: Regex,
}

/// A prompt found in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompt {
    /// Byte offset where the marker starts.
    pub start: usize,
    /// Byte offset just past the marker.
    pub end: usize,
    /// The command sequence number the shell had set (`None` before the first command).
    pub seq: Option<u64>,
    /// The exit status `$?` the prompt showed.
    pub exit_code: i32,
}

impl PromptMarker {
    /// Longest marker in bytes, with room for a 20-digit sequence and a 3-digit code.
    pub fn max_len(&self) -> usize {
        self.nonce.len() + 40
    }

    /// A marker with a fresh random nonce.
    pub fn random() -> Option<Self> {
        let nonce = format!("{:016x}", fastrand::u64(..));
        Self::with_nonce(&nonce)
    }

    /// A marker with the given nonce (hex digits).
    pub fn with_nonce(nonce: &str) -> Option<Self> {
        let regex = Regex::new(&format!(r"__UA{nonce}_([0-9]*)_([0-9]+)__")).ok()?;
        Some(Self {
            nonce: nonce.to_owned(),
            regex,
        })
    }

    /// The `PS1` value that prints the marker (single-quoted shell text: expansions happen at
    /// prompt time).
    pub fn ps1(&self) -> String {
        format!("__UA{}_${{__ua_n}}_$?__", self.nonce)
    }

    /// The first prompt in `haystack` at or after byte `from`.
    pub fn find(&self, haystack: &[u8], from: usize) -> Option<Prompt> {
        let caps = self.regex.captures_at(haystack, from.min(haystack.len()))?;
        let whole = caps.get(0)?;
        let seq = caps
            .get(1)
            .and_then(|m| std::str::from_utf8(m.as_bytes()).ok())
            .and_then(|s| s.parse().ok());
        let exit_code = caps
            .get(2)
            .and_then(|m| std::str::from_utf8(m.as_bytes()).ok())
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        Some(Prompt {
            start: whole.start(),
            end: whole.end(),
            seq,
            exit_code,
        })
    }
}

/// Turns raw pty bytes into SWE-ReX's output text: escape sequences removed, CRLF → LF (a lone
/// CR stays), invalid UTF-8 bytes as `\xNN`. Nothing is trimmed and no newline is added.
pub fn clean_output(raw: &[u8]) -> String {
    let stripped = match ANSI_ESCAPE.as_ref() {
        Some(re) => re.replace_all(raw, &b""[..]),
        None => std::borrow::Cow::Borrowed(raw),
    };
    let mut out = Vec::with_capacity(stripped.len());
    let mut i = 0;
    while i < stripped.len() {
        if stripped[i] == b'\r' && stripped.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(stripped[i]);
        i += 1;
    }
    decode_backslashreplace(&out)
}

/// Bytes collected from a pty while a command runs, with an output limit.
///
/// Up to `limit` bytes are kept from the start; past that, only a tail window is kept (enough to
/// find the end-of-command marker and to show the last lines), and the bytes in between are
/// counted and replaced by a truncation note when the output is taken.
#[derive(Debug, Clone)]
pub struct OutputBuffer {
    data: Vec<u8>,
    limit: usize,
    tail: usize,
    omitted: usize,
    /// Offset in `data` where the omitted bytes were (== `limit` once truncation happened).
    cut_at: Option<usize>,
}

impl OutputBuffer {
    /// A buffer that keeps `limit` head bytes and a `tail`-byte window after truncation.
    pub fn new(limit: usize, tail: usize) -> Self {
        Self {
            data: Vec::new(),
            limit,
            tail: tail.max(1),
            omitted: 0,
            cut_at: None,
        }
    }

    /// Starts over with `pending` bytes (left over from a previous read).
    pub fn reset(&mut self, pending: Vec<u8>) {
        self.data = pending;
        self.omitted = 0;
        self.cut_at = None;
        self.enforce_limit();
    }

    /// The bytes held now.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Appends bytes read from the pty; returns the offset where the new data starts, adjusted
    /// for any bytes dropped by the limit (search from here, minus a marker's length).
    pub fn push(&mut self, chunk: &[u8]) -> usize {
        let start = self.data.len();
        self.data.extend_from_slice(chunk);
        let dropped = self.enforce_limit();
        start.saturating_sub(dropped)
    }

    fn enforce_limit(&mut self) -> usize {
        // Truncate in big steps so that the drain is amortised.
        if self.data.len() <= self.limit.saturating_add(self.tail.saturating_mul(2)) {
            return 0;
        }
        let cut_from = self.cut_at.unwrap_or(self.limit);
        let cut_to = self.data.len() - self.tail;
        if cut_to <= cut_from {
            return 0;
        }
        self.data.drain(cut_from..cut_to);
        self.omitted += cut_to - cut_from;
        self.cut_at = Some(cut_from);
        cut_to - cut_from
    }

    /// Drops the first `end` bytes (a stale prompt and what came before it).
    pub fn discard_prefix(&mut self, end: usize) {
        let end = end.min(self.data.len());
        self.data.drain(..end);
        match self.cut_at {
            Some(cut) if cut <= end => {
                self.cut_at = None;
                self.omitted = 0;
            }
            Some(cut) => self.cut_at = Some(cut - end),
            None => {}
        }
    }

    /// Number of bytes dropped by the limit so far.
    pub fn omitted(&self) -> usize {
        self.omitted
    }

    /// Splits off the output before `end` (with a truncation note if bytes were dropped) and
    /// keeps the bytes after `resume` as pending input for the next read.
    pub fn take(&mut self, end: usize, resume: usize) -> (Vec<u8>, Vec<u8>) {
        let rest = self.data.split_off(resume.min(self.data.len()));
        self.data.truncate(end);
        let mut out = std::mem::take(&mut self.data);
        if let Some(cut) = self.cut_at.take() {
            if cut <= out.len() {
                let note = truncation_note(self.omitted);
                out.splice(cut..cut, note.into_bytes());
            }
        }
        self.omitted = 0;
        (out, rest)
    }
}

/// How far before the newest bytes an `expect` match may start and still be found: each read
/// scans only the new bytes plus this window, never the whole buffer again (a command printing
/// 30 MB would otherwise be rescanned from the start after every 64 KiB read). Only a match
/// longer than this that arrives in pieces can be missed.
pub(crate) const EXPECT_LOOKBACK: usize = 64 << 10;

/// Incremental search for `expect` patterns in a growing buffer.
#[derive(Debug)]
pub struct ExpectSearch<'a> {
    patterns: &'a [Regex],
    scanned: usize,
}

impl<'a> ExpectSearch<'a> {
    /// A search for any of `patterns`.
    pub fn new(patterns: &'a [Regex]) -> Self {
        Self {
            patterns,
            scanned: 0,
        }
    }

    /// The earliest match `(start, end, pattern index)` in `haystack` that starts at or after
    /// `new_from - EXPECT_LOOKBACK`, where `new_from` is where the bytes not yet searched begin.
    pub fn find(&mut self, haystack: &[u8], new_from: usize) -> Option<(usize, usize, usize)> {
        if self.patterns.is_empty() {
            return None;
        }
        let from = new_from.saturating_sub(EXPECT_LOOKBACK).min(haystack.len());
        self.scanned += (haystack.len() - from) * self.patterns.len();
        self.patterns
            .iter()
            .enumerate()
            .filter_map(|(i, re)| re.find_at(haystack, from).map(|m| (m.start(), m.end(), i)))
            .min_by_key(|(start, _, _)| *start)
    }

    /// Bytes scanned so far (per pattern), for tests of the incremental bound.
    pub fn scanned(&self) -> usize {
        self.scanned
    }
}

/// The text inserted where output was dropped.
pub fn truncation_note(omitted: usize) -> String {
    format!("\n[uniagent-sandbox: output truncated, {omitted} bytes omitted]\n")
}

/// `text` cut to about `max` bytes: its head and tail around a [`truncation_note`]. The one
/// truncation used for everything the server echoes back (commands in error messages, inputs
/// in 422 answers), so no answer grows with a hostile input.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut head = max / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (max - head);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}{}{}",
        &text[..head],
        truncation_note(tail - head),
        &text[tail..]
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn clean_output_strips_escapes_and_crlf() {
        assert_eq!(
            clean_output(b"\x1b[1mbold\x1b[0m\r\nnext\r"),
            "bold\nnext\r"
        );
        assert_eq!(clean_output(b"bad \xff\n"), "bad \\xff\n");
    }

    #[test]
    fn shorten_keeps_head_and_tail() {
        assert_eq!(shorten("short", 100), "short");
        let long = "x".repeat(10_000);
        let cut = shorten(&long, 100);
        assert!(cut.len() < 200 && cut.contains("9900 bytes omitted"));
    }

    #[test]
    fn expect_search_is_incremental() {
        // 30 MiB in 64 KiB reads through a 16 MiB buffer, as a chatty command produces it:
        // the scan stays linear in the input instead of rescanning the buffer per read.
        let patterns = [Regex::new("never-printed").unwrap_or_else(|e| panic!("{e}"))];
        let mut search = ExpectSearch::new(&patterns);
        let mut buf = OutputBuffer::new(16 << 20, 4096);
        let chunk = vec![b'y'; 64 << 10];
        let total = 30usize << 20;
        for _ in 0..total / chunk.len() {
            let new_from = buf.push(&chunk);
            assert!(search.find(buf.bytes(), new_from).is_none());
        }
        assert!(
            search.scanned() <= 3 * total,
            "scanned {} for {total}",
            search.scanned()
        );
        // A match split across reads is still found.
        let patterns = [Regex::new("ab+c").unwrap_or_else(|e| panic!("{e}"))];
        let mut search = ExpectSearch::new(&patterns);
        let mut buf = OutputBuffer::new(1 << 20, 4096);
        let mut found = None;
        for piece in [&b"xxa"[..], b"bbb", b"bc--"] {
            let from = buf.push(piece);
            found = found.or(search.find(buf.bytes(), from));
        }
        assert_eq!(found, Some((2, 8, 0)));
    }

    #[test]
    fn marker_round_trip() {
        let m = PromptMarker::with_nonce("00ff").unwrap_or_else(|| panic!("regex"));
        let text = b"out\n__UA00ff_7_130__rest";
        let p = m.find(text, 0).unwrap_or_else(|| panic!("marker"));
        assert_eq!((p.start, p.seq, p.exit_code), (4, Some(7), 130));
        assert_eq!(&text[p.end..], b"rest");
        assert_eq!(m.find(b"__UA00ff__0__", 0).map(|p| p.seq), Some(None));
        assert!(m.find(b"__UA00fe_1_0__", 0).is_none());
    }

    #[test]
    fn truncation_keeps_head_and_tail() {
        let mut b = OutputBuffer::new(10, 4);
        for _ in 0..10 {
            b.push(b"0123456789");
        }
        let len = b.bytes().len();
        let (out, rest) = b.take(len, len);
        assert!(rest.is_empty());
        let text = String::from_utf8(out).unwrap_or_default();
        assert!(
            text.starts_with("0123456789\n[uniagent-sandbox: output truncated, "),
            "{text}"
        );
        assert!(text.ends_with("6789"), "{text}");
    }

    proptest! {
        /// Whatever the chunking, the kept output is the head, the note and the tail of the
        /// stream, and nothing is lost below the limit.
        #[test]
        fn buffer_keeps_exact_head_and_tail(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 0..40), limit in 1usize..200, tail in 1usize..20) {
            let all: Vec<u8> = chunks.concat();
            let mut b = OutputBuffer::new(limit, tail);
            for c in &chunks {
                b.push(c);
            }
            let omitted = b.omitted();
            let len = b.bytes().len();
            let (out, _) = b.take(len, len);
            if omitted == 0 {
                prop_assert_eq!(out, all);
            } else {
                let note = truncation_note(omitted).into_bytes();
                prop_assert_eq!(&out[..limit], &all[..limit]);
                prop_assert_eq!(&out[limit..limit + note.len()], &note[..]);
                let kept_tail = &out[limit + note.len()..];
                prop_assert_eq!(kept_tail, &all[all.len() - kept_tail.len()..]);
                prop_assert_eq!(limit + omitted + kept_tail.len(), all.len());
                prop_assert!(kept_tail.len() >= tail);
            }
        }

        /// Cleaning equals "strip escapes, then replace CRLF" done the obvious way.
        #[test]
        fn clean_output_matches_a_naive_reference(raw in proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'a'), Just(0x1b), Just(b'['), Just(b'm'), Just(0xff)], 0..60)) {
            let re = Regex::new(r"(?-u)\x1B[@-_][0-?]*[ -/]*[@-~]").unwrap_or_else(|_| unreachable!());
            let stripped = re.replace_all(&raw, &b""[..]).into_owned();
            let text: String = stripped.iter().map(|b| if *b == 0xff { "\\xff".to_owned() } else { (*b as char).to_string() }).collect();
            prop_assert_eq!(clean_output(&raw), text.replace("\r\n", "\n"));
        }
    }
}
