//! Decoding of tool arguments: the JSON object a model emitted, carried to the toolbox as
//! base64 on the command line (or in a file for large payloads), validated into typed arguments.
//!
//! Every malformed input gives an [`ArgsError`]; nothing here panics (a fuzz target,
//! `fuzz/fuzz_targets/tool_args_decoding.rs`, checks that).

use std::fmt;

use base64::Engine as _;
use serde_json::{Map, Value};

/// Why tool arguments could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgsError {
    /// The command-line payload is not valid base64.
    Base64(String),
    /// The payload is not valid JSON.
    Json(String),
    /// The JSON is not an object.
    NotAnObject,
    /// A required argument is absent (or `null`).
    Missing(&'static str),
    /// An argument has the wrong type or an invalid value.
    Invalid {
        /// The argument name.
        field: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// An argument the tool does not define.
    Unknown(String),
    /// The `command` is none of the editor's commands.
    UnknownCommand(String),
    /// The command line itself is wrong.
    Usage(String),
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Base64(e) => write!(f, "the arguments payload is not valid base64: {e}"),
            Self::Json(e) => write!(f, "the arguments are not valid JSON: {e}"),
            Self::NotAnObject => write!(f, "the arguments must be a JSON object"),
            Self::Missing(field) => write!(f, "parameter `{field}` is required"),
            Self::Invalid { field, expected } => write!(f, "parameter `{field}` must be {expected}"),
            Self::Unknown(field) => write!(
                f,
                "parameter `{field}` is not defined; allowed parameters: {}",
                EDITOR_PARAMETERS.join(", ")
            ),
            Self::UnknownCommand(c) => write!(
                f,
                "unknown command `{c}`; allowed commands: view, create, str_replace, insert, undo_edit"
            ),
            Self::Usage(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for ArgsError {}

impl ArgsError {
    /// The broad class of this error: always [`uniagent_core::ErrorKind::InvalidInput`] (the
    /// model sent arguments the tool cannot use; the message tells it what to fix).
    pub fn kind(&self) -> uniagent_core::ErrorKind {
        uniagent_core::ErrorKind::InvalidInput
    }

    /// Never: the same arguments fail the same way again.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// The parameter names of `str_replace_editor`, in schema order.
pub const EDITOR_PARAMETERS: [&str; 7] = [
    "command",
    "path",
    "file_text",
    "old_str",
    "new_str",
    "insert_line",
    "view_range",
];

/// The editor's commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditorCommand {
    /// Show a file (optionally a line range) or list a directory.
    View,
    /// Create a new file.
    Create,
    /// Replace a unique occurrence of a string.
    StrReplace,
    /// Insert text after a line.
    Insert,
    /// Revert the last edit of a file.
    UndoEdit,
}

impl EditorCommand {
    /// Parses a command name.
    pub fn parse(name: &str) -> Result<Self, ArgsError> {
        Ok(match name {
            "view" => Self::View,
            "create" => Self::Create,
            "str_replace" => Self::StrReplace,
            "insert" => Self::Insert,
            "undo_edit" => Self::UndoEdit,
            other => return Err(ArgsError::UnknownCommand(other.to_owned())),
        })
    }
}

/// Validated arguments of one `str_replace_editor` call.
///
/// ```
/// use uniagent_tools::toolbox::args::{EditorArgs, EditorCommand};
/// let args = EditorArgs::from_json(br#"{"command": "view", "path": "/a", "view_range": "[1, 5]"}"#).unwrap();
/// assert_eq!(args.command, EditorCommand::View);
/// assert_eq!(args.view_range, Some((1, 5)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditorArgs {
    /// What to do.
    pub command: EditorCommand,
    /// Absolute path of the file or directory.
    pub path: String,
    /// Content for `create`.
    pub file_text: Option<String>,
    /// Text to replace (`str_replace`).
    pub old_str: Option<String>,
    /// Replacement (`str_replace`) or inserted text (`insert`).
    pub new_str: Option<String>,
    /// The line after which `insert` inserts (0 = at the top).
    pub insert_line: Option<i64>,
    /// `[start, end]` for `view`, 1-based and inclusive; `end = -1` means to the end.
    pub view_range: Option<(i64, i64)>,
}

impl EditorArgs {
    /// Decodes a JSON object given as bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ArgsError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| ArgsError::Json(e.to_string()))?;
        Self::from_value(&value)
    }

    /// Decodes the base64 (standard alphabet, padded) encoding of a JSON object.
    pub fn from_base64(text: &str) -> Result<Self, ArgsError> {
        Self::from_json(&decode_base64(text)?)
    }

    /// Validates an already parsed JSON value.
    pub fn from_value(value: &Value) -> Result<Self, ArgsError> {
        let object = value.as_object().ok_or(ArgsError::NotAnObject)?;
        if let Some(unknown) = object
            .keys()
            .find(|k| !EDITOR_PARAMETERS.contains(&k.as_str()))
        {
            return Err(ArgsError::Unknown(unknown.clone()));
        }
        let command = required_string(object, "command")?;
        let command = EditorCommand::parse(&command)?;
        let path = required_string(object, "path")?;
        Ok(Self {
            command,
            path,
            file_text: optional_string(object, "file_text")?,
            old_str: optional_string(object, "old_str")?,
            new_str: optional_string(object, "new_str")?,
            insert_line: optional_integer(object, "insert_line")?,
            view_range: optional_range(object, "view_range")?,
        })
    }
}

/// Encodes bytes as standard padded base64: the form arguments take on the command line. Its
/// alphabet (`A-Z a-z 0-9 + / =`) has no shell metacharacters.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard padded base64.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, ArgsError> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| ArgsError::Base64(e.to_string()))
}

fn present<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    object.get(field).filter(|v| !v.is_null())
}

fn required_string(object: &Map<String, Value>, field: &'static str) -> Result<String, ArgsError> {
    optional_string(object, field)?.ok_or(ArgsError::Missing(field))
}

fn optional_string(
    object: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, ArgsError> {
    match present(object, field) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ArgsError::Invalid {
            field,
            expected: "a string",
        }),
    }
}

fn as_integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn optional_integer(
    object: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<i64>, ArgsError> {
    match present(object, field) {
        None => Ok(None),
        Some(v) => as_integer(v).map(Some).ok_or(ArgsError::Invalid {
            field,
            expected: "an integer",
        }),
    }
}

fn optional_range(
    object: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<(i64, i64)>, ArgsError> {
    const EXPECTED: &str = "a list of two integers, e.g. [1, 20]";
    let invalid = ArgsError::Invalid {
        field,
        expected: EXPECTED,
    };
    let parsed;
    let value = match present(object, field) {
        None => return Ok(None),
        // Models sometimes send the list JSON-encoded as a string.
        Some(Value::String(s)) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|_| invalid.clone())?;
            &parsed
        }
        Some(v) => v,
    };
    match value.as_array().map(Vec::as_slice) {
        Some([a, b]) => match (as_integer(a), as_integer(b)) {
            (Some(a), Some(b)) => Ok(Some((a, b))),
            _ => Err(invalid),
        },
        _ => Err(invalid),
    }
}

/// How the toolbox was asked to run, decoded from its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `str_replace_editor` with its JSON arguments.
    Editor(Payload),
    /// `truncate MAX_CHARS`: copy stdin to stdout, keeping head and tail.
    Truncate {
        /// The most characters to print.
        max_chars: usize,
    },
    /// `--version`.
    Version,
    /// `--help`.
    Help,
}

/// Where a subcommand's JSON arguments come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Inline, base64-encoded.
    Base64(String),
    /// A file holding the raw JSON, deleted after it is read.
    File(String),
}

/// Decodes the toolbox's command line (`argv[0]` included). See the [module docs](super) for
/// the format.
///
/// ```
/// use uniagent_tools::toolbox::args::{parse_command_line, Invocation, Payload};
/// let argv = ["/opt/uniagent-toolbox", "str_replace_editor", "e30="];
/// assert_eq!(parse_command_line(&argv).unwrap(), Invocation::Editor(Payload::Base64("e30=".into())));
/// ```
pub fn parse_command_line<S: AsRef<str>>(argv: &[S]) -> Result<Invocation, ArgsError> {
    let argv: Vec<&str> = argv.iter().map(AsRef::as_ref).collect();
    let program = argv
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .unwrap_or_default();
    // Multi-call: invoked through a link named after the subcommand.
    let rest: &[&str] = match program {
        "str_replace_editor" | "truncate" => &argv,
        _ => argv.get(1..).unwrap_or_default(),
    };
    let usage = || ArgsError::Usage(USAGE.to_owned());
    let (sub, tail) = rest.split_first().ok_or_else(usage)?;
    let sub = sub.rsplit('/').next().unwrap_or(sub);
    match (sub, tail) {
        ("--version" | "-V", []) => Ok(Invocation::Version),
        ("--help" | "-h", []) => Ok(Invocation::Help),
        ("str_replace_editor", [payload]) => {
            Ok(Invocation::Editor(Payload::Base64((*payload).to_owned())))
        }
        ("str_replace_editor", ["--args-file", path]) => {
            Ok(Invocation::Editor(Payload::File((*path).to_owned())))
        }
        ("truncate", [n]) => n
            .parse()
            .map(|max_chars| Invocation::Truncate { max_chars })
            .map_err(|_| ArgsError::Usage(format!("truncate: `{n}` is not a character count"))),
        _ => Err(usage()),
    }
}

/// The toolbox's usage text.
pub const USAGE: &str = "usage:
  uniagent-toolbox str_replace_editor <base64 of the JSON arguments>
  uniagent-toolbox str_replace_editor --args-file <file holding the JSON arguments; deleted after reading>
  uniagent-toolbox truncate <max characters>   (stdin to stdout, head and tail kept)
  uniagent-toolbox --version | --help
environment: UNIAGENT_TOOLBOX_STATE_DIR  where edit histories live (default /tmp/uniagent-toolbox/state)";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn coerces_what_models_commonly_send() {
        let a = EditorArgs::from_value(
            &json!({"command": "insert", "path": "/x", "insert_line": "3",
            "new_str": "a", "view_range": [1.0, -1], "old_str": null}),
        )
        .unwrap();
        assert_eq!(
            (a.insert_line, a.view_range, a.old_str),
            (Some(3), Some((1, -1)), None)
        );
    }

    #[test]
    fn rejects_bad_shapes_with_typed_errors() {
        let e = |v: Value| EditorArgs::from_value(&v).unwrap_err();
        assert_eq!(e(json!([1])), ArgsError::NotAnObject);
        let missing = e(json!({"path": "/x"}));
        assert_eq!(missing.kind(), uniagent_core::ErrorKind::InvalidInput);
        assert!(!missing.is_retryable());
        assert_eq!(e(json!({"path": "/x"})), ArgsError::Missing("command"));
        assert_eq!(e(json!({"command": "view"})), ArgsError::Missing("path"));
        assert_eq!(
            e(json!({"command": "vi", "path": "/x"})),
            ArgsError::UnknownCommand("vi".into())
        );
        assert_eq!(
            e(json!({"command": "view", "path": "/x", "bogus": 1})),
            ArgsError::Unknown("bogus".into())
        );
        assert!(matches!(
            e(json!({"command": "view", "path": 3})),
            ArgsError::Invalid { field: "path", .. }
        ));
        assert!(matches!(
            e(json!({"command": "view", "path": "/x", "view_range": [1]})),
            ArgsError::Invalid {
                field: "view_range",
                ..
            }
        ));
        assert!(matches!(
            e(json!({"command": "insert", "path": "/x", "insert_line": 1.5})),
            ArgsError::Invalid {
                field: "insert_line",
                ..
            }
        ));
        assert!(matches!(
            EditorArgs::from_base64("***"),
            Err(ArgsError::Base64(_))
        ));
        assert!(matches!(
            EditorArgs::from_base64(&encode_base64(b"{")),
            Err(ArgsError::Json(_))
        ));
    }

    #[test]
    fn base64_round_trips_any_bytes() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_base64(&encode_base64(&bytes)).unwrap(), bytes);
    }

    #[test]
    fn command_line_forms() {
        assert_eq!(
            parse_command_line(&["tb", "str_replace_editor", "--args-file", "/t/a.json"]).unwrap(),
            Invocation::Editor(Payload::File("/t/a.json".into()))
        );
        assert_eq!(
            parse_command_line(&["/bin/str_replace_editor", "eA=="]).unwrap(),
            Invocation::Editor(Payload::Base64("eA==".into()))
        );
        assert_eq!(
            parse_command_line(&["tb", "truncate", "10"]).unwrap(),
            Invocation::Truncate { max_chars: 10 }
        );
        assert_eq!(
            parse_command_line(&["tb", "--version"]).unwrap(),
            Invocation::Version
        );
        assert!(matches!(
            parse_command_line(&["tb"]),
            Err(ArgsError::Usage(_))
        ));
        assert!(matches!(
            parse_command_line::<&str>(&[]),
            Err(ArgsError::Usage(_))
        ));
        assert!(matches!(
            parse_command_line(&["tb", "truncate", "x"]),
            Err(ArgsError::Usage(_))
        ));
    }

    /// The fuzz target's checks (`fuzz/fuzz_targets/tool_args_decoding.rs`) as a property test,
    /// so they run in every `cargo test` too.
    mod like_the_fuzz_target {
        use proptest::prelude::*;

        use super::super::*;

        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                "\\PC{0,12}".prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 16, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map(
                        prop_oneof![
                            Just("command".to_owned()),
                            Just("path".to_owned()),
                            Just("view_range".to_owned()),
                            Just("insert_line".to_owned()),
                            Just("new_str".to_owned()),
                            "[a-z_]{1,8}"
                        ],
                        inner,
                        0..5
                    )
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_decode_the_same_inline_and_via_base64(data in prop::collection::vec(any::<u8>(), 0..256)) {
                prop_assert_eq!(EditorArgs::from_json(&data), EditorArgs::from_base64(&encode_base64(&data)));
                let text = String::from_utf8_lossy(&data);
                let _ = EditorArgs::from_base64(&text);
                let argv: Vec<&str> = text.split('\0').collect();
                let _ = parse_command_line(&argv);
            }

            #[test]
            fn arbitrary_json_never_panics_and_ranges_are_pairs(value in json_value()) {
                if let Ok(args) = EditorArgs::from_value(&value) {
                    prop_assert!(value["path"].is_string() && value["command"].is_string());
                    let bytes = serde_json::to_vec(&value).unwrap();
                    prop_assert_eq!(EditorArgs::from_base64(&encode_base64(&bytes)), Ok(args));
                }
            }
        }
    }
}
