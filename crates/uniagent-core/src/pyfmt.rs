//! Text as Python's built-ins print it: `repr(float)`, `repr(str)` and `repr` of a list of
//! strings. SWE-ReX's error messages, Uni-Agent's feedback and Jinja's `{{ x }}` in chat
//! templates all come from these, so one copy serves the sandbox server, the loop and the codec.
//!
//! ```
//! use uniagent_core::pyfmt::{float_repr, list_repr, str_repr};
//!
//! assert_eq!(float_repr(1e-5), "1e-05");
//! assert_eq!(float_repr(10.0), "10.0");
//! assert_eq!(str_repr("it's"), "\"it's\"");
//! assert_eq!(list_repr(&["sh", "-c"]), "['sh', '-c']");
//! ```

use std::fmt::Write as _;

/// Python's `repr(x)` (and `str(x)`) of a float: the shortest digits that round-trip, scientific
/// notation when the exponent is below -4 or at least 16, always a `.0` or an exponent; `nan`,
/// `inf`, `-inf`.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{x:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    if !(-4..16).contains(&exp) {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs());
    }
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let n = digits.len() as i32;
    let point = exp + 1; // digits before the decimal point
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{digits}{}.0", "0".repeat((point - n) as usize))
    } else {
        let (a, b) = digits.split_at(point as usize);
        format!("{a}.{b}")
    };
    format!("{sign}{body}")
}

/// Python's `repr(s)` of a `str`: single quotes unless the text holds `'` and no `"`, and
/// backslash escapes for what `str.isprintable` rejects.
pub fn str_repr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_str_repr(s, &mut out);
    out
}

/// [`str_repr`] appended to `out`.
pub fn write_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
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
}

/// Python's `repr` of a list of strings: `['sh', '-c', 'exit 3']`.
pub fn list_repr<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str_repr(item.as_ref(), &mut out);
    }
    out.push(']');
    out
}

/// An approximation of `str.isprintable` for one character: control characters, separators other
/// than the ASCII space, and the format characters that commonly appear are not printable.
fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_match_python_repr() {
        for (f, py) in [
            (1e-5, "1e-05"),
            (10.0, "10.0"),
            (1.0, "1.0"),
            (0.5, "0.5"),
            (0.1, "0.1"),
            (3.25, "3.25"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345.6, "123456789012345.6"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (-2.5e-7, "-2.5e-07"),
            (3.0e100, "3e+100"),
            (-0.0, "-0.0"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(float_repr(f), py, "{f}");
        }
    }

    #[test]
    fn strings_quote_and_escape_like_python() {
        assert_eq!(str_repr("echo hi"), "'echo hi'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(str_repr(""), "''");
        assert_eq!(str_repr("a\nb\t\x01\x7f"), "'a\\nb\\t\\x01\\x7f'");
        assert_eq!(
            str_repr("\u{85}\u{200b}\u{feff}é"),
            "'\\x85\\u200b\\ufeffé'"
        );
        assert_eq!(list_repr(&["sh", "-c", "exit 3"]), "['sh', '-c', 'exit 3']");
        assert_eq!(list_repr::<&str>(&[]), "[]");
    }
}
