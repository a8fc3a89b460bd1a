//! `cassettes.jsonl`: one cassette per line, a loop cassette per rollout of `uniagent run`
//! ([`Cassette`](crate::cassette::Cassette)) or a gateway cassette per session of `uniagent
//! gateway` (`uniagent_gateway::cassette::GatewayCassette`). One file may mix both.
//!
//! This module owns the envelope every line shares, so that each reader and writer applies the
//! same rules: the version field `"cassette": 1`, and the `kind` that tells the two apart
//! (`"gateway"`; a loop cassette has no `kind`). Readers call [`decode`] (or read a file with
//! [`read`] and decode each [`CassetteLine`]); writers build their line with [`to_line`], which
//! refuses to write what the reader would refuse. The bodies are the owning crates' serde
//! types; the JSON Schema of both is [`SCHEMA`] (`schemas/cassette.v1.schema.json` in this
//! crate).
//!
//! Version 1 is the only version so far: a line of another version is a typed error
//! ([`CassetteError::UnsupportedVersion`]), never misread.
//!
//! ```
//! use uniagent_core::formats::cassettes::{kind_of, CassetteError, CassetteKind};
//! let gateway = serde_json::json!({"cassette": 1, "kind": "gateway"});
//! assert_eq!(kind_of(&gateway)?, CassetteKind::Gateway);
//! assert_eq!(kind_of(&serde_json::json!({"cassette": 1}))?, CassetteKind::Loop);
//! let newer = serde_json::json!({"cassette": 2});
//! assert!(matches!(kind_of(&newer), Err(CassetteError::UnsupportedVersion { found: 2 })));
//! # Ok::<(), CassetteError>(())
//! ```

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::jsonl::JsonlLines;
use crate::error::Error;

/// The file name in an output directory (`uniagent run`, `uniagent gateway --out`).
pub const FILE_NAME: &str = "cassettes.jsonl";

/// The version writers produce and readers accept, in the field `cassette`.
pub const VERSION: u32 = 1;

/// The `kind` of a gateway cassette.
pub const GATEWAY_KIND: &str = "gateway";

/// The JSON Schema (draft 2020-12) of a version-1 line, both kinds, as writers produce it.
/// A gateway cassette's `trajectories` refer to the trajectory record's schema by its `$id`
/// ([`trajectories::SCHEMA`](crate::formats::trajectories::SCHEMA)).
pub const SCHEMA: &str = include_str!("../../schemas/cassette.v1.schema.json");

/// Which of the two cassette bodies a line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CassetteKind {
    /// One rollout of the interaction loop (`uniagent run`); no `kind` field.
    Loop,
    /// One session of the gateway; `"kind": "gateway"`.
    Gateway,
}

impl CassetteKind {
    /// The value of the `kind` field (`None`: the field is absent).
    pub fn field(self) -> Option<&'static str> {
        match self {
            Self::Loop => None,
            Self::Gateway => Some(GATEWAY_KIND),
        }
    }
}

impl std::fmt::Display for CassetteKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Loop => "loop",
            Self::Gateway => "gateway",
        })
    }
}

/// Why a line is not a cassette of the expected kind (or could not be encoded as one).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// The text is not JSON.
    #[error("a cassette is not JSON: {source}")]
    NotJson {
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The object has no integer field `cassette`.
    #[error("not a cassette: the version field `cassette` is missing")]
    MissingVersion,
    /// A version this build does not read.
    #[error(
        "cassette format version {found} is not supported (this build reads version {VERSION})"
    )]
    UnsupportedVersion {
        /// The line's version.
        found: u64,
    },
    /// A `kind` this build does not know.
    #[error("unknown cassette kind {found}: this build reads loop cassettes (no `kind`) and \"{GATEWAY_KIND}\"")]
    UnknownKind {
        /// The line's `kind`.
        found: Value,
    },
    /// A cassette of the other kind than the caller decodes.
    #[error("{}", wrong_kind(*expected))]
    WrongKind {
        /// The kind the caller decodes.
        expected: CassetteKind,
    },
    /// The envelope is right, the body does not fit the kind's type.
    #[error("malformed {}cassette: {source}", body_prefix(*kind))]
    Malformed {
        /// The kind decoded.
        kind: CassetteKind,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A writer's cassette could not be encoded, or its envelope is not version 1 of a known
    /// kind (the reader would refuse the line).
    #[error("encoding a cassette: {message}")]
    Encode {
        /// What went wrong.
        message: String,
    },
}

fn wrong_kind(expected: CassetteKind) -> String {
    match expected {
        CassetteKind::Gateway => {
            format!("not a gateway cassette: `kind` is not \"{GATEWAY_KIND}\"")
        }
        CassetteKind::Loop => {
            format!("not a loop cassette: `kind` is \"{GATEWAY_KIND}\"")
        }
    }
}

/// `"gateway "` in the gateway's messages; the loop's say just "cassette", as they always have.
fn body_prefix(kind: CassetteKind) -> &'static str {
    match kind {
        CassetteKind::Loop => "",
        CassetteKind::Gateway => "gateway ",
    }
}

impl From<CassetteError> for Error {
    fn from(e: CassetteError) -> Self {
        Error::invalid_input(e.to_string())
    }
}

/// The version of `line`, checked: [`VERSION`], or the error a reader reports.
fn check_version(line: &Value) -> Result<(), CassetteError> {
    match line.get("cassette").and_then(Value::as_u64) {
        Some(v) if v == u64::from(VERSION) => Ok(()),
        Some(found) => Err(CassetteError::UnsupportedVersion { found }),
        None => Err(CassetteError::MissingVersion),
    }
}

/// Whether `line`'s `kind` is `"gateway"` (its version unchecked; see [`kind_of`]).
pub fn is_gateway(line: &Value) -> bool {
    line.get("kind").and_then(Value::as_str) == Some(GATEWAY_KIND)
}

/// The kind of a version-1 line; another version, a missing version or an unknown `kind` is
/// an error.
pub fn kind_of(line: &Value) -> Result<CassetteKind, CassetteError> {
    check_version(line)?;
    match line.get("kind") {
        None => Ok(CassetteKind::Loop),
        Some(_) if is_gateway(line) => Ok(CassetteKind::Gateway),
        Some(found) => Err(CassetteError::UnknownKind {
            found: found.clone(),
        }),
    }
}

/// Decodes a version-1 line of kind `expected` into its body type `T`
/// ([`Cassette`](crate::cassette::Cassette) for [`CassetteKind::Loop`], the gateway's
/// `GatewayCassette` for [`CassetteKind::Gateway`]).
///
/// The version is checked first, then the kind (a gateway cassette wants `"kind": "gateway"`, a
/// loop cassette no `kind`), then the body.
///
/// ```
/// use uniagent_core::formats::cassettes::{decode, CassetteKind};
/// let line = serde_json::json!({"cassette": 1, "kind": "gateway"});
/// let err = decode::<serde_json::Value>(line, CassetteKind::Loop).unwrap_err();
/// assert_eq!(err.to_string(), "not a loop cassette: `kind` is \"gateway\"");
/// ```
pub fn decode<T: DeserializeOwned>(
    line: Value,
    expected: CassetteKind,
) -> Result<T, CassetteError> {
    check_version(&line)?;
    match (expected, line.get("kind")) {
        (CassetteKind::Loop, None) => {}
        (CassetteKind::Loop, Some(_)) if is_gateway(&line) => {
            return Err(CassetteError::WrongKind { expected })
        }
        (CassetteKind::Loop, Some(found)) => {
            return Err(CassetteError::UnknownKind {
                found: found.clone(),
            })
        }
        (CassetteKind::Gateway, _) if is_gateway(&line) => {}
        (CassetteKind::Gateway, _) => return Err(CassetteError::WrongKind { expected }),
    }
    serde_json::from_value(line).map_err(|source| CassetteError::Malformed {
        kind: expected,
        source,
    })
}

/// The envelope fields, read back from an encoded line.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    cassette: Value,
    #[serde(default)]
    kind: Option<Value>,
}

/// `cassette` as one line, `\n` included: its serde form, checked to carry version 1 and a
/// known kind, so that no writer produces a line [`decode`] refuses.
///
/// ```
/// use uniagent_core::formats::cassettes::to_line;
/// let line = to_line(&serde_json::json!({"cassette": 1, "kind": "gateway", "id": "s"}))?;
/// assert!(line.ends_with(b"}\n"));
/// assert!(to_line(&serde_json::json!({"cassette": 2})).is_err());
/// # Ok::<(), uniagent_core::formats::cassettes::CassetteError>(())
/// ```
pub fn to_line<T: Serialize + ?Sized>(cassette: &T) -> Result<Vec<u8>, CassetteError> {
    let encode = |e: serde_json::Error| CassetteError::Encode {
        message: e.to_string(),
    };
    // Written straight from the value (not through `Value`), so that floats keep the shortest
    // form of their own width.
    let mut bytes = serde_json::to_vec(cassette).map_err(encode)?;
    if bytes.first() != Some(&b'{') {
        return Err(CassetteError::Encode {
            message: "a cassette must be a JSON object".into(),
        });
    }
    let envelope: Envelope = serde_json::from_slice(&bytes).map_err(encode)?;
    let mut fields = serde_json::Map::new();
    fields.insert("cassette".into(), envelope.cassette);
    if let Some(kind) = envelope.kind {
        fields.insert("kind".into(), kind);
    }
    kind_of(&Value::Object(fields)).map_err(|e| CassetteError::Encode {
        message: e.to_string(),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// One line of a cassettes file: its envelope checked, its body not yet decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct CassetteLine {
    /// The body's kind.
    pub kind: CassetteKind,
    /// The whole line, for the kind's decoder.
    pub value: Value,
    /// The 1-based line number ([`read`]; 0 from [`parse_line`]).
    pub line: usize,
}

/// Reads one line: JSON, version 1, a known kind.
pub fn parse_line(text: &str) -> Result<CassetteLine, CassetteError> {
    let value: Value =
        serde_json::from_str(text).map_err(|source| CassetteError::NotJson { source })?;
    let kind = kind_of(&value)?;
    Ok(CassetteLine {
        kind,
        value,
        line: 0,
    })
}

/// An iterator over the lines of a `cassettes.jsonl` ([`read`]).
#[derive(Debug)]
pub struct CassetteLines {
    lines: JsonlLines,
}

/// Opens `path` and reads it line by line (blank lines skipped); each item is a
/// [`CassetteLine`], [`Error::InvalidInput`] naming `path:line` for a line whose envelope is
/// wrong, or [`Error::Io`].
///
/// ```no_run
/// # fn main() -> uniagent_core::Result<()> {
/// use uniagent_core::cassette::Cassette;
/// use uniagent_core::formats::cassettes::{self, CassetteKind};
/// for line in cassettes::read("runs/quick/cassettes.jsonl".as_ref())? {
///     let line = line?;
///     if line.kind == CassetteKind::Loop {
///         println!("{}", Cassette::from_value(line.value)?.id);
///     }
/// }
/// # Ok(()) }
/// ```
pub fn read(path: &Path) -> crate::Result<CassetteLines> {
    Ok(CassetteLines {
        lines: JsonlLines::open(path)?,
    })
}

impl Iterator for CassetteLines {
    type Item = crate::Result<CassetteLine>;

    fn next(&mut self) -> Option<Self::Item> {
        self.lines
            .next_parsed(|text, line| parse_line(text).map(|l| CassetteLine { line, ..l }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_envelope_names_the_kind_and_refuses_other_versions_and_kinds() {
        assert_eq!(
            kind_of(&json!({"cassette": 1})).unwrap(),
            CassetteKind::Loop
        );
        assert_eq!(
            kind_of(&json!({"cassette": 1, "kind": "gateway"})).unwrap(),
            CassetteKind::Gateway
        );
        assert!(matches!(
            kind_of(&json!({"kind": "gateway"})),
            Err(CassetteError::MissingVersion)
        ));
        assert!(matches!(
            kind_of(&json!({"cassette": "1"})),
            Err(CassetteError::MissingVersion)
        ));
        assert!(matches!(
            kind_of(&json!({"cassette": 0})),
            Err(CassetteError::UnsupportedVersion { found: 0 })
        ));
        let err = kind_of(&json!({"cassette": 1, "kind": "loop"})).unwrap_err();
        assert!(matches!(err, CassetteError::UnknownKind { .. }), "{err}");
        assert!(err.to_string().contains("\"loop\""), "{err}");
    }

    #[test]
    fn decoding_checks_version_then_kind_then_body() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            cassette: u32,
            id: String,
        }
        let ok: Body = decode(json!({"cassette": 1, "id": "a"}), CassetteKind::Loop).unwrap();
        assert_eq!((ok.cassette, ok.id.as_str()), (1, "a"));
        let err = decode::<Body>(json!({"cassette": 3, "kind": "x"}), CassetteKind::Loop);
        assert!(matches!(
            err,
            Err(CassetteError::UnsupportedVersion { found: 3 })
        ));
        let err = decode::<Body>(json!({"cassette": 1}), CassetteKind::Gateway).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not a gateway cassette: `kind` is not \"gateway\""
        );
        let err = decode::<Body>(json!({"cassette": 1, "id": 5}), CassetteKind::Loop).unwrap_err();
        assert!(err.to_string().starts_with("malformed cassette: "), "{err}");
        let err = decode::<Body>(
            json!({"cassette": 1, "kind": "gateway"}),
            CassetteKind::Gateway,
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("malformed gateway cassette: "),
            "{err}"
        );
        // Core's error keeps the message, as an invalid input.
        let core: Error = CassetteError::MissingVersion.into();
        assert_eq!(core.kind(), crate::ErrorKind::InvalidInput);
    }

    #[test]
    fn to_line_refuses_what_the_reader_refuses() {
        let line = to_line(&json!({"cassette": 1, "id": "a", "lp": [0.1_f32]})).unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        let back = parse_line(std::str::from_utf8(&line).unwrap()).unwrap();
        assert_eq!(back.kind, CassetteKind::Loop);
        for bad in [
            json!({"id": "a"}),
            json!({"cassette": 2}),
            json!({"cassette": 1, "kind": 3}),
        ] {
            assert!(
                matches!(to_line(&bad), Err(CassetteError::Encode { .. })),
                "{bad}"
            );
        }
        assert!(to_line(&[1]).is_err(), "an array is not a cassette");
    }

    #[test]
    fn read_names_the_line_and_skips_blank_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(
            &path,
            "{\"cassette\": 1, \"kind\": \"gateway\"}\n\n{\"cassette\": 1}\n{\"cassette\": 9}\n",
        )
        .unwrap();
        let lines: Vec<_> = read(&path).unwrap().collect();
        assert_eq!(lines.len(), 3);
        let first = lines[0].as_ref().unwrap();
        assert_eq!((first.kind, first.line), (CassetteKind::Gateway, 1));
        let second = lines[1].as_ref().unwrap();
        assert_eq!((second.kind, second.line), (CassetteKind::Loop, 3));
        let err = lines[2].as_ref().unwrap_err().to_string();
        assert!(
            err.contains("cassettes.jsonl:4") && err.contains("version 9"),
            "{err}"
        );
        assert!(read(&dir.path().join("missing")).is_err());
    }
}
