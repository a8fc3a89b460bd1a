//! Values printed the way Python's Jinja prints them: `{{ x }}` is `str(x)` in `jinja2`, so
//! `None`, `True`, `1e-05`, `['a', 1]` and `{'k': None}` rather than minijinja's `none`, `true`,
//! `0.00001` and JSON-like containers.

use minijinja::value::{Value, ValueKind};

use crate::pyfmt::{float_repr, write_str_repr};

/// `str(value)` in Python: strings as they are, everything else as [`py_repr`].
pub(crate) fn py_str(value: &Value, out: &mut String) {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => out.push_str(s),
        _ => py_repr(value, out),
    }
}

/// `repr(value)` in Python for the values a chat template sees (JSON-shaped data).
pub(crate) fn py_repr(value: &Value, out: &mut String) {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => {
            if value.is_integer() {
                out.push_str(&value.to_string());
            } else if let Ok(f) = f64::try_from(value.clone()) {
                out.push_str(&float_repr(f));
            } else {
                out.push_str(&value.to_string());
            }
        }
        ValueKind::String if value.is_safe() => {
            super::markup::write_markup_repr(value.as_str().unwrap_or_default(), out);
        }
        ValueKind::String => write_str_repr(value.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = value.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&item, out);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = value.try_iter() {
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&key, out);
                    out.push_str(": ");
                    if let Ok(v) = value.get_item(&key) {
                        py_repr(&v, out);
                    }
                }
            }
            out.push('}');
        }
        _ => out.push_str(&value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(v: serde_json::Value) -> String {
        let mut s = String::new();
        py_str(&Value::from(minijinja::value::Serde(&v)), &mut s);
        s
    }

    #[test]
    fn python_str_of_json_values() {
        assert_eq!(repr(serde_json::json!(null)), "None");
        assert_eq!(repr(serde_json::json!(true)), "True");
        assert_eq!(repr(serde_json::json!(1e-5)), "1e-05");
        assert_eq!(repr(serde_json::json!([3.0, 3])), "[3.0, 3]");
        assert_eq!(repr(serde_json::json!("a'b")), "a'b");
        assert_eq!(
            repr(serde_json::json!({"k": [1, "x'", null, false], "n": 2.0})),
            r#"{'k': [1, "x'", None, False], 'n': 2.0}"#
        );
    }
}
