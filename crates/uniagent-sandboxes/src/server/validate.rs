//! Request-body validation with SWE-ReX's (pydantic 2, lax mode) rules and FastAPI's 422 error
//! shape: required discriminators (`session_type`, `action_type`), unknown fields ignored, lax
//! coercion (`"5"` → `5.0`, `1` → `true`), one `{type, loc, msg, input, ctx?}` item per problem.
//!
//! A body that passes is normalised (coerced values, only known fields) and then deserialised
//! into the shared protocol types of `uniagent_core::sandbox`.

use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::errors::ServerError;

/// The type of one field, with pydantic's lax coercions.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// `str`: strings only.
    Str,
    /// `str | None`.
    OptStr,
    /// `bool`: booleans, 0/1, and the strings pydantic accepts (`"true"`, `"off"`...).
    Bool,
    /// `float`: numbers, numeric strings, booleans.
    Float,
    /// `float | None`.
    OptFloat,
    /// `int`: integers, integral floats, integer strings, booleans. Negative values become 0
    /// (the only `int` field, `n_retry`, counts attempts).
    Count,
    /// `list[str]`.
    StrList,
    /// `dict[str, str] | None`.
    OptStrMap,
    /// `Literal[...]` of strings.
    Literal(&'static [&'static str]),
    /// `str | list[str]`.
    StrOrList,
}

/// One field of a model.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// JSON name.
    pub name: &'static str,
    /// Type.
    pub kind: Kind,
    /// Whether the field has no default.
    pub required: bool,
}

const fn opt(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: false,
    }
}

const fn req(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: true,
    }
}

/// The variants of a tagged model: `(tag value, fields)`.
pub(crate) type Variants = &'static [(&'static str, &'static [Field])];

/// A model: its fields, and the discriminator it must carry, if any (`(field, allowed tags)`).
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Discriminator field and the variants it selects: `(tag value, fields)`.
    pub tag: Option<(&'static str, Variants)>,
    /// Fields of an untagged model.
    pub fields: &'static [Field],
}

const CREATE_SESSION_FIELDS: &[Field] = &[
    opt("session", Kind::Str),
    opt("startup_source", Kind::StrList),
    opt("startup_timeout", Kind::Float),
];
const CLOSE_SESSION_FIELDS: &[Field] = &[opt("session", Kind::Str)];
const BASH_ACTION_FIELDS: &[Field] = &[
    req("command", Kind::Str),
    opt("session", Kind::Str),
    opt("timeout", Kind::OptFloat),
    opt("check", Kind::Literal(&["raise", "silent", "ignore"])),
    opt("error_msg", Kind::Str),
    opt("is_interactive_command", Kind::Bool),
    opt("is_interactive_quit", Kind::Bool),
    opt("expect", Kind::StrList),
];
const INTERRUPT_FIELDS: &[Field] = &[
    opt("session", Kind::Str),
    opt("timeout", Kind::Float),
    opt("n_retry", Kind::Count),
    opt("expect", Kind::StrList),
];

/// `CreateBashSessionRequest` (tag `session_type: bash`).
pub const CREATE_SESSION: Model = Model {
    tag: Some(("session_type", &[("bash", CREATE_SESSION_FIELDS)])),
    fields: &[],
};
/// `CloseBashSessionRequest` (tag `session_type: bash`).
pub const CLOSE_SESSION: Model = Model {
    tag: Some(("session_type", &[("bash", CLOSE_SESSION_FIELDS)])),
    fields: &[],
};
/// `BashAction | BashInterruptAction` (tag `action_type`).
pub const ACTION: Model = Model {
    tag: Some((
        "action_type",
        &[
            ("bash", BASH_ACTION_FIELDS),
            ("bash_interrupt", INTERRUPT_FIELDS),
        ],
    )),
    fields: &[],
};
/// `Command`.
pub const COMMAND: Model = Model {
    tag: None,
    fields: &[
        req("command", Kind::StrOrList),
        opt("shell", Kind::Bool),
        opt("timeout", Kind::OptFloat),
        opt("check", Kind::Bool),
        opt("error_msg", Kind::Str),
        opt("env", Kind::OptStrMap),
        opt("cwd", Kind::OptStr),
        opt("merge_output_streams", Kind::Bool),
    ],
};
/// `ReadFileRequest`.
pub const READ_FILE: Model = Model {
    tag: None,
    fields: &[
        req("path", Kind::Str),
        opt("encoding", Kind::OptStr),
        opt("errors", Kind::OptStr),
    ],
};
/// `WriteFileRequest`.
pub const WRITE_FILE: Model = Model {
    tag: None,
    fields: &[req("content", Kind::Str), req("path", Kind::Str)],
};

/// Parses and validates a JSON request body against `model`, then deserialises it into `T`.
pub fn parse_body<T: DeserializeOwned>(body: &[u8], model: &Model) -> Result<T, ServerError> {
    let value = parse_json(body)?;
    let normalised = validate(&value, model)?;
    serde_json::from_value(normalised).map_err(|e| {
        ServerError::invalid(
            json!({"type": "value_error", "loc": ["body"], "msg": e.to_string(), "input": value}),
        )
    })
}

/// Parses a body as JSON with FastAPI's errors for a missing body and for invalid JSON.
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, ServerError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ServerError::invalid(
            json!({"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let position = byte_offset(body, e.line(), e.column());
        ServerError::invalid(json!({
            "type": "json_invalid", "loc": ["body", position], "msg": "JSON decode error",
            "input": {}, "ctx": {"error": e.to_string()}
        }))
    })
}

fn byte_offset(body: &[u8], line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in body.split(|b| *b == b'\n').enumerate() {
        if i + 1 == line {
            return offset + column.saturating_sub(1);
        }
        offset += l.len() + 1;
    }
    offset.min(body.len())
}

/// Validates `value` against `model`; returns the normalised object or all errors found.
pub(crate) fn validate(value: &Value, model: &Model) -> Result<Value, ServerError> {
    let Some(object) = value.as_object() else {
        return Err(ServerError::invalid(json!({
            "type": "model_attributes_type", "loc": ["body"],
            "msg": "Input should be a valid dictionary or object to extract fields from", "input": value
        })));
    };
    let mut errors = Vec::new();
    let mut out = Map::new();
    match model.tag {
        None => check_fields(
            object,
            model.fields,
            &[json!("body")],
            &mut out,
            &mut errors,
        ),
        Some((tag_field, variants)) => {
            let expected = variants
                .iter()
                .map(|(t, _)| format!("'{t}'"))
                .collect::<Vec<_>>()
                .join(", ");
            let discriminator = format!("'{tag_field}'");
            match object.get(tag_field).and_then(Value::as_str) {
                None if !object.contains_key(tag_field) => errors.push(json!({
                    "type": "union_tag_not_found", "loc": ["body"],
                    "msg": format!("Unable to extract tag using discriminator {discriminator}"),
                    "input": value, "ctx": {"discriminator": discriminator}
                })),
                found => {
                    let tag = found.map_or_else(|| object[tag_field].to_string(), str::to_owned);
                    match variants.iter().find(|(t, _)| found == Some(*t)) {
                        Some((t, fields)) => {
                            out.insert(tag_field.to_owned(), Value::String((*t).to_owned()));
                            check_fields(object, fields, &[json!("body"), json!(t)], &mut out, &mut errors);
                        }
                        None => errors.push(json!({
                            "type": "union_tag_invalid", "loc": ["body"],
                            "msg": format!("Input tag '{tag}' found using {discriminator} does not match any of the expected tags: {expected}"),
                            "input": value,
                            "ctx": {"discriminator": discriminator, "tag": tag, "expected_tags": expected}
                        })),
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(Value::Object(out))
    } else {
        Err(ServerError::Validation(errors))
    }
}

fn check_fields(
    object: &Map<String, Value>,
    fields: &[Field],
    loc: &[Value],
    out: &mut Map<String, Value>,
    errors: &mut Vec<Value>,
) {
    for field in fields {
        let here = at(loc, json!(field.name));
        match object.get(field.name) {
            None if field.required => errors.push(json!({
                "type": "missing", "loc": here, "msg": "Field required", "input": Value::Object(object.clone())
            })),
            None => {}
            Some(v) => match coerce(v, field.kind, &here) {
                Ok(v) => {
                    out.insert(field.name.to_owned(), v);
                }
                Err(mut e) => errors.append(&mut e),
            },
        }
    }
}

fn err(kind: &str, loc: &[Value], msg: &str, input: &Value) -> Vec<Value> {
    vec![json!({"type": kind, "loc": loc, "msg": msg, "input": input})]
}

/// `loc` extended by one key.
fn at(loc: &[Value], key: Value) -> Vec<Value> {
    let mut here = loc.to_vec();
    here.push(key);
    here
}

/// Checks `v` against `kind` the way pydantic's lax mode does, and returns the coerced value or
/// pydantic's error objects.
fn coerce(v: &Value, kind: Kind, loc: &[Value]) -> Result<Value, Vec<Value>> {
    match (kind, v) {
        (Kind::OptStr | Kind::OptFloat | Kind::OptStrMap, Value::Null) => Ok(Value::Null),
        (Kind::Str | Kind::OptStr, Value::String(_)) => Ok(v.clone()),
        (Kind::Str | Kind::OptStr, _) => {
            Err(err("string_type", loc, "Input should be a valid string", v))
        }
        (Kind::Bool, _) => coerce_bool(v).map(Value::Bool).ok_or_else(|| match v {
            Value::String(_) | Value::Number(_) => err(
                "bool_parsing",
                loc,
                "Input should be a valid boolean, unable to interpret input",
                v,
            ),
            _ => err("bool_type", loc, "Input should be a valid boolean", v),
        }),
        (Kind::Float | Kind::OptFloat, _) => coerce_float(v, loc),
        (Kind::Count, _) => coerce_count(v, loc),
        (Kind::StrList, Value::Array(items)) => {
            strings_only(v, items.iter().enumerate().map(|(i, x)| (json!(i), x)), loc)
        }
        (Kind::StrList, _) => Err(err("list_type", loc, "Input should be a valid list", v)),
        (Kind::OptStrMap, Value::Object(map)) => {
            strings_only(v, map.iter().map(|(k, x)| (json!(k), x)), loc)
        }
        (Kind::OptStrMap, _) => Err(err(
            "dict_type",
            loc,
            "Input should be a valid dictionary",
            v,
        )),
        (Kind::Literal(allowed), _) => literal(v, allowed, loc),
        (Kind::StrOrList, Value::String(_)) => Ok(v.clone()),
        (Kind::StrOrList, Value::Array(_)) => {
            coerce(v, Kind::StrList, &at(loc, json!("list[str]")))
        }
        (Kind::StrOrList, _) => {
            let mut errors = err(
                "string_type",
                &at(loc, json!("str")),
                "Input should be a valid string",
                v,
            );
            errors.extend(err(
                "list_type",
                &at(loc, json!("list[str]")),
                "Input should be a valid list",
                v,
            ));
            Err(errors)
        }
    }
}

fn coerce_float(v: &Value, loc: &[Value]) -> Result<Value, Vec<Value>> {
    match v {
        Value::Number(n) => Ok(json!(n.as_f64().unwrap_or(0.0))),
        Value::Bool(b) => Ok(json!(if *b { 1.0 } else { 0.0 })),
        Value::String(s) => match s.trim().parse::<f64>() {
            Ok(f) => Ok(json!(f)),
            Err(_) => Err(err(
                "float_parsing",
                loc,
                "Input should be a valid number, unable to parse string as a number",
                v,
            )),
        },
        _ => Err(err("float_type", loc, "Input should be a valid number", v)),
    }
}

/// A non-negative count: pydantic's lax integer, then clamped to `[0, u32::MAX]`.
fn coerce_count(v: &Value, loc: &[Value]) -> Result<Value, Vec<Value>> {
    let not_integer = |message: &str| err("int_parsing", loc, message, v);
    let n: i64 = match v {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i,
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9e15 => f as i64,
            (None, Some(_)) => {
                return Err(err(
                    "int_from_float",
                    loc,
                    "Input should be a valid integer, got a number with a fractional part",
                    v,
                ))
            }
            _ => return Err(not_integer("Input should be a valid integer")),
        },
        Value::Bool(b) => i64::from(*b),
        Value::String(s) => s.trim().parse::<i64>().map_err(|_| {
            not_integer("Input should be a valid integer, unable to parse string as an integer")
        })?,
        _ => return Err(err("int_type", loc, "Input should be a valid integer", v)),
    };
    Ok(json!(n.clamp(0, i64::from(u32::MAX))))
}

/// A list or map whose items must all be strings; each other item is an error at its key.
fn strings_only<'a>(
    v: &Value,
    items: impl Iterator<Item = (Value, &'a Value)>,
    loc: &[Value],
) -> Result<Value, Vec<Value>> {
    let errors: Vec<Value> = items
        .filter(|(_, item)| !item.is_string())
        .flat_map(|(key, item)| {
            err(
                "string_type",
                &at(loc, key),
                "Input should be a valid string",
                item,
            )
        })
        .collect();
    if errors.is_empty() {
        Ok(v.clone())
    } else {
        Err(errors)
    }
}

fn literal(v: &Value, allowed: &[&str], loc: &[Value]) -> Result<Value, Vec<Value>> {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => Ok(v.clone()),
        _ => {
            let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
            let expected = match quoted.split_last() {
                Some((last, rest)) if !rest.is_empty() => {
                    format!("{} or {last}", rest.join(", "))
                }
                _ => quoted.join(""),
            };
            Err(vec![json!({
                "type": "literal_error", "loc": loc, "msg": format!("Input should be {expected}"),
                "input": v, "ctx": {"expected": expected}
            })])
        }
    }
}

/// pydantic's lax boolean parsing.
pub(crate) fn coerce_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_f64() {
            Some(0.0) => Some(false),
            Some(1.0) => Some(true),
            _ => None,
        },
        Value::String(s) => parse_bool_str(s),
        _ => None,
    }
}

/// The strings pydantic accepts as booleans (case-insensitive).
pub(crate) fn parse_bool_str(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
        "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use uniagent_core::sandbox::{Command, CreateSessionRequest};

    use super::*;

    #[test]
    fn parse_body_validates_then_deserialises() {
        use uniagent_core::sandbox::Action;

        let action: Action = parse_body(
            br#"{"action_type":"bash","command":"ls","timeout":"5"}"#,
            &ACTION,
        )
        .unwrap();
        let Action::Bash(bash) = action else {
            unreachable!()
        };
        assert_eq!(bash.timeout, Some(5.0));
        assert!(parse_body::<Action>(br#"{"command":"ls"}"#, &ACTION).is_err());
        // tag missing
    }

    fn detail(e: ServerError) -> Vec<Value> {
        match e {
            ServerError::Validation(items) => items,
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn create_session_requires_the_tag_even_for_an_empty_object() {
        let items = detail(parse_body::<CreateSessionRequest>(b"{}", &CREATE_SESSION).unwrap_err());
        assert_eq!(items[0]["type"], "union_tag_not_found");
        assert_eq!(items[0]["ctx"]["discriminator"], "'session_type'");
    }

    #[test]
    fn invalid_tags_list_the_expected_ones() {
        let items = detail(
            parse_body::<uniagent_core::sandbox::Action>(br#"{"action_type":"zsh"}"#, &ACTION)
                .unwrap_err(),
        );
        assert_eq!(items[0]["type"], "union_tag_invalid");
        assert_eq!(items[0]["ctx"]["expected_tags"], "'bash', 'bash_interrupt'");
    }

    #[test]
    fn field_errors_carry_the_variant_in_loc() {
        let items = detail(
            parse_body::<uniagent_core::sandbox::Action>(
                br#"{"action_type":"bash","check":"loud","timeout":"x"}"#,
                &ACTION,
            )
            .unwrap_err(),
        );
        let types: Vec<&str> = items.iter().filter_map(|i| i["type"].as_str()).collect();
        assert_eq!(types, ["missing", "float_parsing", "literal_error"]);
        assert_eq!(items[0]["loc"], json!(["body", "bash", "command"]));
        assert_eq!(
            items[2]["msg"],
            "Input should be 'raise', 'silent' or 'ignore'"
        );
    }

    #[test]
    fn lax_coercions_apply() {
        let c: Command = parse_body(
            br#"{"command":["ls"],"shell":"yes","timeout":3,"check":0}"#,
            &COMMAND,
        )
        .unwrap();
        assert!(c.shell);
        assert!(!c.check);
        assert_eq!(c.timeout, Some(3.0));
        let items = detail(parse_body::<Command>(br#"{"command":5}"#, &COMMAND).unwrap_err());
        assert_eq!(items.len(), 2);
        assert_eq!(items[1]["loc"], json!(["body", "command", "list[str]"]));
    }

    proptest::proptest! {
        /// The fuzz target's JSON half, as a property: any bytes give a value or a 422, never a
        /// panic; structured JSON exercises the coercions.
        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
                                 json_text in r#"\{("(action_type|session_type|command|timeout|check|expect|env|shell|n_retry|path)": ?("bash"|"bash_interrupt"|[0-9.e-]{1,6}|true|null|\[("x"|1)?\]|\{"a": ?(1|"b")\}|"[a-z0-9 ]{0,5}"),? ?){0,6}\}"#) {
            for body in [&bytes[..], json_text.as_bytes()] {
                let _ = parse_body::<uniagent_core::sandbox::Action>(body, &ACTION);
                let _ = parse_body::<CreateSessionRequest>(body, &CREATE_SESSION);
                let _ = parse_body::<uniagent_core::sandbox::CloseSessionRequest>(body, &CLOSE_SESSION);
                let _ = parse_body::<Command>(body, &COMMAND);
                let _ = parse_body::<uniagent_core::sandbox::ReadFileRequest>(body, &READ_FILE);
                let _ = parse_body::<uniagent_core::sandbox::WriteFileRequest>(body, &WRITE_FILE);
            }
        }
    }

    #[test]
    fn missing_and_broken_bodies() {
        assert_eq!(detail(parse_json(b"").unwrap_err())[0]["type"], "missing");
        assert_eq!(
            detail(parse_json(b"{\"a\":").unwrap_err())[0]["type"],
            "json_invalid"
        );
        assert_eq!(
            detail(validate(&json!([1]), &COMMAND).unwrap_err())[0]["type"],
            "model_attributes_type"
        );
    }
}
