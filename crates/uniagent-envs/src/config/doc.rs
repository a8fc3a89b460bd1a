//! [`ConfigDoc`]: a configuration file read into a JSON value, with `--set` overrides applied,
//! that decodes typed sections and turns every error into `file:line: key: message`.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use uniagent_core::config::ConfigFormat;

use super::locate::line_of;
use crate::error::{EnvError, Result};

/// One `--set KEY=VALUE` override.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The dotted key, split.
    pub path: Vec<String>,
    /// The value, read as a YAML scalar or flow collection (`4`, `true`, `[a, b]`), else a
    /// string.
    pub value: Value,
    /// The override as written, for error messages.
    pub text: String,
}

impl Override {
    /// Parses `a.b.c=value`.
    ///
    /// ```
    /// use uniagent_envs::config::Override;
    /// let o = Override::parse("runner.samples_per_task=4").unwrap();
    /// assert_eq!(o.path, ["runner", "samples_per_task"]);
    /// assert_eq!(o.value, serde_json::json!(4));
    /// assert_eq!(Override::parse("model.http.model=gpt-4o").unwrap().value, "gpt-4o");
    /// assert!(Override::parse("novalue").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| EnvError::config("--set", "", format!("`{text}`: {why}"));
        let (key, raw) = text
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=VALUE with a dotted KEY"))?;
        let path: Vec<String> = key.trim().split('.').map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            return Err(bad("the key has an empty part"));
        }
        let value = if raw.trim().is_empty() {
            Value::String(String::new())
        } else {
            serde_norway::from_str::<Value>(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
        };
        Ok(Self {
            path,
            value,
            text: text.to_owned(),
        })
    }

    /// Writes the value into `doc`, creating maps on the way.
    fn apply(&self, doc: &mut Value) -> Result<()> {
        let mut node = doc;
        for (i, key) in self.path.iter().enumerate() {
            if node.is_null() {
                *node = Value::Object(Map::new());
            }
            let last = i + 1 == self.path.len();
            node = match node {
                Value::Object(map) => {
                    if last {
                        map.insert(key.clone(), self.value.clone());
                        return Ok(());
                    }
                    map.entry(key.clone()).or_insert(Value::Null)
                }
                Value::Array(items) => {
                    let idx: usize = key.parse().map_err(|_| {
                        EnvError::config(
                            format!("--set {}", self.text),
                            self.path[..i].join("."),
                            "is a list: index it with a number",
                        )
                    })?;
                    let len = items.len();
                    let slot = items.get_mut(idx).ok_or_else(|| {
                        EnvError::config(
                            format!("--set {}", self.text),
                            self.path[..i].join("."),
                            format!("has {len} items, no index {idx}"),
                        )
                    })?;
                    if last {
                        *slot = self.value.clone();
                        return Ok(());
                    }
                    slot
                }
                _ => {
                    return Err(EnvError::config(
                        format!("--set {}", self.text),
                        self.path[..i].join("."),
                        "is not a map, so it has no sub-keys",
                    ))
                }
            };
        }
        Ok(())
    }
}

/// A configuration document: its text (for line numbers), its value after overrides.
#[derive(Debug, Clone)]
pub struct ConfigDoc {
    file: PathBuf,
    text: String,
    format: ConfigFormat,
    value: Value,
    overrides: Vec<Override>,
}

impl ConfigDoc {
    /// Reads `file` (YAML, TOML or JSON by extension) and applies `overrides` in order.
    pub fn load(file: &Path, overrides: &[String]) -> Result<Self> {
        let shown = file.display().to_string();
        let format = ConfigFormat::from_path(file).map_err(|_| {
            EnvError::config(
                &shown,
                "",
                "unknown config format (use .yaml, .yml, .toml or .json)",
            )
        })?;
        let text = std::fs::read_to_string(file)
            .map_err(|e| EnvError::config(&shown, "", format!("cannot read the file: {e}")))?;
        Self::from_text(file, text, format, overrides)
    }

    /// A document from text already read.
    pub fn from_text(
        file: &Path,
        text: String,
        format: ConfigFormat,
        overrides: &[String],
    ) -> Result<Self> {
        let shown = file.display().to_string();
        let mut value = parse_value(&text, format, &shown)?;
        if value.is_null() {
            value = Value::Object(Map::new());
        }
        if !value.is_object() {
            return Err(EnvError::config(
                &shown,
                "",
                "the top level must be a map of sections",
            ));
        }
        let overrides = overrides
            .iter()
            .map(|o| Override::parse(o))
            .collect::<Result<Vec<_>>>()?;
        for o in &overrides {
            o.apply(&mut value)?;
        }
        Ok(Self {
            file: file.to_owned(),
            text,
            format,
            value,
            overrides,
        })
    }

    /// The file the document was read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The directory relative paths in the file are resolved against.
    pub fn base_dir(&self) -> PathBuf {
        self.file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// The whole value, overrides applied.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Decodes `value`, found at `prefix` in the document, as `T`; errors name the origin
    /// (`file:line` or the `--set` that put the value there) and the full key path.
    pub fn decode<T: DeserializeOwned>(&self, prefix: &[&str], value: &Value) -> Result<T> {
        serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
            let mut path: Vec<String> = prefix.iter().map(|s| (*s).to_owned()).collect();
            path.extend(segments(e.path()));
            let message = e.inner().to_string();
            // Point at the unknown key itself, not at its parent.
            if let Some(key) = unknown_field(&message) {
                if path.last().map(String::as_str) != Some(key) {
                    path.push(key.to_owned());
                }
            }
            self.error_at(&path, message)
        })
    }

    /// An error about the key at `path`.
    pub fn error_at(&self, path: &[String], message: impl std::fmt::Display) -> EnvError {
        let dotted = path.join(".");
        let shown = self.file.display().to_string();
        let origin = match self.override_for(path) {
            Some(o) => format!("--set {}", o.text),
            None => match line_of(&self.text, self.format, path) {
                Some(line) => format!("{shown}:{line}"),
                None => shown,
            },
        };
        EnvError::config(origin, dotted, message)
    }

    /// The last override that set `path` or a key above or below it.
    fn override_for(&self, path: &[String]) -> Option<&Override> {
        self.overrides.iter().rev().find(|o| {
            let n = o.path.len().min(path.len());
            n > 0 && o.path[..n] == path[..n]
        })
    }
}

/// The key of serde's "unknown field `x`, expected ..." message.
fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(k, _)| k)
}

fn segments(path: &serde_path_to_error::Path) -> Vec<String> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Map { key } | Segment::Enum { variant: key } => Some(key.clone()),
            Segment::Unknown => None,
        })
        .collect()
}

fn parse_value(text: &str, format: ConfigFormat, shown: &str) -> Result<Value> {
    use uniagent_core::config::{nesting_depth, MAX_NESTING};
    let (depth, line) = nesting_depth(text);
    if depth > MAX_NESTING {
        return Err(EnvError::config(
            format!("{shown}:{line}"),
            "",
            format!(
                "collections nest more than {MAX_NESTING} levels deep (refused before parsing)"
            ),
        ));
    }
    match format {
        ConfigFormat::Yaml => serde_norway::from_str(text).map_err(|e| {
            let origin = match e.location() {
                Some(l) => format!("{shown}:{}", l.line()),
                None => shown.to_owned(),
            };
            EnvError::config(origin, "", format!("not valid YAML: {e}"))
        }),
        ConfigFormat::Toml => toml::from_str(text).map_err(|e| {
            let origin = match e.span() {
                Some(span) => format!(
                    "{shown}:{}",
                    1 + text[..span.start.min(text.len())].matches('\n').count()
                ),
                None => shown.to_owned(),
            };
            EnvError::config(origin, "", format!("not valid TOML: {}", e.message()))
        }),
        ConfigFormat::Json => serde_json::from_str(text).map_err(|e| {
            EnvError::config(
                format!("{shown}:{}", e.line()),
                "",
                format!("not valid JSON: {e}"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        max_turns: u32,
    }

    fn doc(text: &str, format: ConfigFormat, sets: &[&str]) -> Result<ConfigDoc> {
        let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
        ConfigDoc::from_text(Path::new("run.yaml"), text.to_owned(), format, &sets)
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let d = doc(
            "tasks: {}\nloop:\n  max_turns: many\n",
            ConfigFormat::Yaml,
            &[],
        )
        .unwrap();
        let err = d
            .decode::<Inner>(&["loop"], &d.value()["loop"])
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("run.yaml:3: `loop.max_turns`: invalid type"),
            "{msg}"
        );
        let d = doc("loop:\n  max_turn: 3\n", ConfigFormat::Yaml, &[]).unwrap();
        let msg = d
            .decode::<Inner>(&["loop"], &d.value()["loop"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown field `max_turn`"), "{msg}");
        assert!(msg.starts_with("run.yaml:"), "{msg}");
    }

    #[test]
    fn overrides_apply_and_are_blamed() {
        let d = doc(
            "loop:\n  max_turns: 3\n",
            ConfigFormat::Yaml,
            &["loop.max_turns=7"],
        )
        .unwrap();
        assert_eq!(d.value()["loop"]["max_turns"], 7);
        let d = doc(
            "loop:\n  max_turns: 3\n",
            ConfigFormat::Yaml,
            &["loop.max_turns=x"],
        )
        .unwrap();
        let msg = d
            .decode::<Inner>(&["loop"], &d.value()["loop"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("--set loop.max_turns=x: `loop.max_turns`"),
            "{msg}"
        );
        let d = doc("", ConfigFormat::Yaml, &["a.b.c=[1, 2]"]).unwrap();
        assert_eq!(d.value()["a"]["b"]["c"], serde_json::json!([1, 2]));
        let err = doc("a: 3\n", ConfigFormat::Yaml, &["a.b=1"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn syntax_errors_have_lines() {
        let err = doc("a = 1\nb = = 2\n", ConfigFormat::Toml, &[])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("run.yaml:2: not valid TOML"), "{err}");
        let err = doc("a: [1\nb: 2\n", ConfigFormat::Yaml, &[])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("run.yaml:"), "{err}");
    }
}
