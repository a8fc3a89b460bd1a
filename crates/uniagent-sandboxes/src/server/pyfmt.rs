//! Python-compatible text formatting: the pieces of SWE-ReX's messages and outputs that come from
//! Python built-ins (`bytes.decode(errors="backslashreplace")` here; `repr` and `str(float)` from
//! `uniagent_core::pyfmt`).

use std::fmt::Write as _;

/// Decodes `bytes` as UTF-8 the way Python's `bytes.decode("utf-8", errors="backslashreplace")`
/// does: every byte of an invalid sequence becomes the four characters `\xNN` (lower-case hex).
pub(crate) fn decode_backslashreplace(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// `repr` of floats, strings and string lists: one copy in `uniagent_core::pyfmt`.
pub(crate) use uniagent_core::pyfmt::{
    float_repr as py_float, list_repr as py_repr_list, str_repr as py_repr,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backslashreplace_escapes_invalid_bytes() {
        assert_eq!(decode_backslashreplace(b"ok\xff\xfe\n"), "ok\\xff\\xfe\n");
        assert_eq!(decode_backslashreplace("é".as_bytes()), "é");
    }

    #[test]
    fn truncated_sequences_escape_each_byte() {
        assert_eq!(decode_backslashreplace(b"a\xe2\x82"), "a\\xe2\\x82");
        assert_eq!(decode_backslashreplace(b"\xe2\x82\xac"), "€");
        assert_eq!(decode_backslashreplace(b"\xc3("), "\\xc3(");
    }
}
