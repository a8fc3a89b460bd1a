//! JSON text exactly as Python's `json.dumps(obj, ensure_ascii=False)` writes it.
//!
//! Hugging Face chat templates call `tojson`, which `transformers` maps to `json.dumps`. Its
//! output differs from `serde_json`'s compact form: `", "` and `": "` separators, floats in
//! Python's `repr` (`1e-05`, `10.0`, `1e+16`), and optional indentation.

use serde_json::Value;

/// Options of Python's `json.dumps` that chat templates pass through `tojson`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PyJsonOptions {
    /// `indent=N`: pretty-print with N spaces (item separator becomes `","`).
    pub indent: Option<usize>,
    /// `sort_keys=True`.
    pub sort_keys: bool,
    /// `ensure_ascii=True`: escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
}

/// Serialises `value` like Python's `json.dumps(value, ensure_ascii=False)`.
///
/// ```
/// use serde_json::json;
/// use uniagent_core::codec::py_json_dumps;
///
/// assert_eq!(py_json_dumps(&json!({"a": [1, 2.0, 1e-5], "b": "é<>"})), r#"{"a": [1, 2.0, 1e-05], "b": "é<>"}"#);
/// ```
pub fn py_json_dumps(value: &Value) -> String {
    py_json_dumps_with(value, &PyJsonOptions::default())
}

/// Serialises `value` like Python's `json.dumps` with the given options.
pub fn py_json_dumps_with(value: &Value, options: &PyJsonOptions) -> String {
    let mut out = String::new();
    write_value(&mut out, value, options, 0);
    out
}

fn newline_indent(out: &mut String, indent: usize, depth: usize) {
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', indent * depth));
}

fn write_value(out: &mut String, value: &Value, options: &PyJsonOptions, depth: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else if let Some(f) = n.as_f64() {
                out.push_str(&py_float_repr(f));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => write_string(out, s, options.ensure_ascii),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(if options.indent.is_some() { "," } else { ", " });
                }
                if let Some(ind) = options.indent {
                    newline_indent(out, ind, depth + 1);
                }
                write_value(out, item, options, depth + 1);
            }
            if let Some(ind) = options.indent {
                newline_indent(out, ind, depth);
            }
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if options.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(if options.indent.is_some() { "," } else { ", " });
                }
                if let Some(ind) = options.indent {
                    newline_indent(out, ind, depth + 1);
                }
                write_string(out, k, options.ensure_ascii);
                out.push_str(": ");
                write_value(out, v, options, depth + 1);
            }
            if let Some(ind) = options.indent {
                newline_indent(out, ind, depth);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Python's `json.dumps` writes it: [`crate::pyfmt::float_repr`] for finite values,
/// `NaN`, `Infinity` and `-Infinity` otherwise.
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_owned()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        crate::pyfmt::float_repr(f)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn floats_are_python_repr_and_non_finite_ones_javascript_names() {
        assert_eq!(py_float_repr(1e-5), "1e-05");
        assert_eq!(py_float_repr(-0.0), "-0.0");
        assert_eq!(py_float_repr(f64::NAN), "NaN");
        assert_eq!(py_float_repr(f64::NEG_INFINITY), "-Infinity");
    }

    #[test]
    fn separators_escapes_and_indent_follow_python() {
        let v = json!({"k": ["a\"\\\n\u{1}", null, true, {}], "é": []});
        assert_eq!(
            py_json_dumps(&v),
            "{\"k\": [\"a\\\"\\\\\\n\\u0001\", null, true, {}], \"é\": []}"
        );
        let pretty = py_json_dumps_with(
            &json!({"a": [1, 2]}),
            &PyJsonOptions {
                indent: Some(2),
                ..Default::default()
            },
        );
        assert_eq!(pretty, "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
        let ascii = py_json_dumps_with(
            &json!("é😀"),
            &PyJsonOptions {
                ensure_ascii: true,
                ..Default::default()
            },
        );
        assert_eq!(ascii, "\"\\u00e9\\ud83d\\ude00\"");
    }
}
