//! Fuzzes what a session's pty output goes through: the output buffer with its limit and tail
//! window, the prompt-marker search, the incremental `expect` search, and the cleaning into
//! SWE-ReX's text. Input: a chunking seed byte, then the raw output. Invariants: no panic, the
//! kept output stays within the limit plus the truncation note and the tail, and a marker
//! planted at the end is always found.

#![no_main]

use libfuzzer_sys::fuzz_target;
use regex::bytes::Regex;
use uniagent_sandboxes::fuzzing::{
    clean_output, truncation_note, ExpectSearch, OutputBuffer, PromptMarker,
};

const LIMIT: usize = 512;
const TAIL: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, raw)) = data.split_first() else {
        return;
    };
    let Some(marker) = PromptMarker::with_nonce("0123456789abcdef") else {
        return;
    };
    let patterns = [Regex::new(r"(?-u)\x1b\[[0-9;]*m|>>> $").unwrap_or_else(|_| unreachable!())];
    let mut search = ExpectSearch::new(&patterns);
    let mut buf = OutputBuffer::new(LIMIT, TAIL);
    let step = usize::from(seed % 17) + 1;
    let mut input = raw.to_vec();
    input.extend_from_slice(b"__UA0123456789abcdef_7_0__");
    let mut found = None;
    for chunk in input.chunks(step) {
        let from = buf.push(chunk);
        let _ = search.find(buf.bytes(), from);
        if found.is_none() {
            found = marker.find(buf.bytes(), from.saturating_sub(marker.max_len()));
        }
    }
    // The planted prompt is the last thing printed: a late search finds it whatever happened.
    let prompt = marker
        .find(buf.bytes(), 0)
        .filter(|p| p.seq == Some(7) && p.exit_code == 0);
    assert!(prompt.is_some() || found.is_some(), "planted prompt lost");
    let end = buf.bytes().len();
    let omitted = buf.omitted();
    let (out, _) = buf.take(end, end);
    let note = truncation_note(omitted).len();
    // The buffer never holds more than the head, two tail windows and the note.
    assert!(
        out.len() <= LIMIT + 2 * TAIL + note,
        "{} bytes kept",
        out.len()
    );
    let _ = clean_output(&out);
});
