//! Python-compatible text formatting: the pieces of SWE-ReX's messages and outputs that come from
//! Python built-ins (`repr`, `str(float)`, `bytes.decode(errors="backslashreplace")`).

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

/// Python's `str(x)` / `repr(x)` for a float: `1.0`, `0.5`, `1e-05`, `inf`.
pub(crate) fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let abs = x.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        // Python switches to exponent notation: 1e-05, 1.5e+16.
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{x}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// Python's `repr(s)` for a `str`.
pub(crate) fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c => {
                let code = c as u32;
                let _ = if code < 0x100 {
                    write!(out, "\\x{code:02x}")
                } else if code < 0x10000 {
                    write!(out, "\\u{code:04x}")
                } else {
                    write!(out, "\\U{code:08x}")
                };
            }
        }
    }
    out.push(quote);
    out
}

/// Python's `repr` of a list of strings: `['sh', '-c', 'exit 3']`.
pub(crate) fn py_repr_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_repr(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// An approximation of `str.isprintable` for one character: control characters, separators other
/// than the ASCII space, and unassigned/format code points are not printable.
fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    // Format characters (Cf) that Python escapes and that commonly appear.
    !matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backslashreplace_escapes_invalid_bytes() {
        assert_eq!(decode_backslashreplace(b"ok\xff\xfe\n"), "ok\\xff\\xfe\n");
        assert_eq!(decode_backslashreplace("é".as_bytes()), "é");
    }

    #[test]
    fn repr_quotes_like_python() {
        assert_eq!(py_repr("echo hi"), "'echo hi'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a\nb\t\x01"), "'a\\nb\\t\\x01'");
    }

    #[test]
    fn floats_print_like_python() {
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(10.0), "10.0");
        assert_eq!(py_float(1e-5), "1e-05");
        assert_eq!(py_float(0.2), "0.2");
        assert_eq!(py_float(3.25), "3.25");
    }

    #[test]
    fn truncated_sequences_escape_each_byte() {
        assert_eq!(decode_backslashreplace(b"a\xe2\x82"), "a\\xe2\\x82");
        assert_eq!(decode_backslashreplace(b"\xe2\x82\xac"), "€");
        assert_eq!(decode_backslashreplace(b"\xc3("), "\\xc3(");
    }

    #[test]
    fn repr_of_lists_and_quotes() {
        assert_eq!(
            py_repr_list(&["sh".into(), "-c".into(), "exit 3".into()]),
            "['sh', '-c', 'exit 3']"
        );
        assert_eq!(py_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(py_repr(""), "''");
    }
}
