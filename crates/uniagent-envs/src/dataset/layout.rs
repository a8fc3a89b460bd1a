//! Field mappings of the dataset layouts people already have. Each turns a row into a task id
//! and metadata (SWE-bench field names kept as they are, lists normalised), and names the
//! missing or mistyped field when a row does not fit.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uniagent_core::Message;

use super::read::kind;

/// How the rows of a dataset are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// `{id, messages, metadata}`: the task as uniagent stores it (messages in OpenAI format);
    /// without `messages` the prompt template builds them from `metadata`.
    #[default]
    Plain,
    /// SWE-bench: `instance_id, repo, base_commit, problem_statement, patch, test_patch,
    /// FAIL_TO_PASS, PASS_TO_PASS, version` (test lists as lists or JSON-encoded strings).
    SweBench,
    /// SWE-rebench: SWE-bench plus `install_config`, `FAIL_TO_FAIL`, `PASS_TO_FAIL`.
    SweRebench,
    /// R2E-Gym: `docker_image, problem_statement, repo_name, commit_hash,
    /// expected_output_json`; the image's `/testbed/run_tests.sh` runs its hidden tests
    /// (`/r2e_tests`), graded by `uniagent_rewards::r2e`.
    R2eGym,
    /// Search QA (NQ, HotpotQA, ...): `question`, `golden_answers` (list or string), `id`.
    SearchQa,
}

/// A row turned into task parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// Task id.
    pub id: String,
    /// Metadata: the row's fields, normalised.
    pub metadata: Map<String, Value>,
    /// Messages given by the row itself (plain layout), else `None` (the template makes them).
    pub messages: Option<Vec<Message>>,
}

const SWE_TEST_LISTS: [&str; 2] = ["FAIL_TO_PASS", "PASS_TO_PASS"];
const REBENCH_TEST_LISTS: [&str; 2] = ["FAIL_TO_FAIL", "PASS_TO_FAIL"];

impl Layout {
    /// Maps one row; `row` is 1-based (used as the id of search-QA rows without one).
    pub fn map(self, row: usize, mut fields: Map<String, Value>) -> Result<Mapped, String> {
        match self {
            Self::Plain => {
                let id = id_field(&fields, "id")?;
                let messages = match fields.remove("messages") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(
                        serde_json::from_value::<Vec<Message>>(v)
                            .map_err(|e| format!("field `messages`: {e}"))?,
                    ),
                };
                let metadata = match fields.remove("metadata") {
                    None | Some(Value::Null) => Map::new(),
                    Some(Value::Object(m)) => m,
                    Some(other) => {
                        return Err(format!(
                            "field `metadata` must be an object, got {}",
                            kind(&other)
                        ))
                    }
                };
                fields.remove("id");
                if let Some(extra) = fields.keys().next() {
                    return Err(format!(
                        "unknown field `{extra}` (the plain layout has id, messages, metadata)"
                    ));
                }
                Ok(Mapped {
                    id,
                    metadata,
                    messages,
                })
            }
            Self::SweBench | Self::SweRebench => {
                for key in ["instance_id", "repo", "base_commit", "problem_statement"] {
                    require_string(&fields, key)?;
                }
                for key in ["patch", "test_patch", "version"] {
                    optional_string(&mut fields, key)?;
                }
                for key in SWE_TEST_LISTS {
                    normalise_list(&mut fields, key, true)?;
                }
                if self == Self::SweRebench {
                    for key in REBENCH_TEST_LISTS {
                        normalise_list(&mut fields, key, false)?;
                    }
                    normalise_object(&mut fields, "install_config")?;
                }
                let id = id_field(&fields, "instance_id")?;
                Ok(Mapped {
                    id,
                    metadata: fields,
                    messages: None,
                })
            }
            Self::R2eGym => {
                let image = require_string(&fields, "docker_image")?.to_owned();
                require_string(&fields, "problem_statement")?;
                normalise_object(&mut fields, "expected_output_json")?;
                let id = match fields.get("instance_id").and_then(Value::as_str) {
                    Some(id) => id.to_owned(),
                    None => image
                        .rsplit('/')
                        .next()
                        .unwrap_or(&image)
                        .replace(':', "__"),
                };
                fields
                    .entry("instance_id")
                    .or_insert_with(|| Value::String(id.clone()));
                fields.entry("image").or_insert(Value::String(image));
                Ok(Mapped {
                    id,
                    metadata: fields,
                    messages: None,
                })
            }
            Self::SearchQa => {
                require_string(&fields, "question")?;
                let answers = match fields.get("golden_answers") {
                    Some(Value::String(s)) => vec![Value::String(s.clone())],
                    Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => items.clone(),
                    Some(other) => {
                        return Err(format!(
                            "field `golden_answers` must be a non-empty list of strings or a string, got {}",
                            kind(other)
                        ))
                    }
                    None => return Err("missing field `golden_answers`".into()),
                };
                fields.insert("golden_answers".into(), Value::Array(answers));
                let id = match fields.get("id") {
                    None | Some(Value::Null) => format!("row-{row}"),
                    Some(_) => id_field(&fields, "id")?,
                };
                Ok(Mapped {
                    id,
                    metadata: fields,
                    messages: None,
                })
            }
        }
    }

    /// The user-message template used when the config gives none.
    pub fn default_template(self) -> &'static str {
        match self {
            Self::Plain => "{{ prompt }}",
            Self::SweBench | Self::SweRebench | Self::R2eGym => {
                "The repository is checked out in {{ repo_dir | default('/testbed') }}. Resolve this issue:\n\n\
                 <issue>\n{{ problem_statement }}\n</issue>\n\n\
                 Change the non-test source files so that the issue is fixed, check your change, \
                 then call `submit`."
            }
            Self::SearchQa => {
                "Answer the question. Use the `search` tool to look things up, then call `finish` \
                 with a short answer.\n\nQuestion: {{ question }}"
            }
        }
    }
}

fn id_field(fields: &Map<String, Value>, key: &str) -> Result<String, String> {
    match fields.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::String(_)) => Err(format!("field `{key}` is empty")),
        Some(other) => Err(format!(
            "field `{key}` must be a string, got {}",
            kind(other)
        )),
        None => Err(format!("missing field `{key}`")),
    }
}

fn require_string<'a>(fields: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match fields.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "field `{key}` must be a string, got {}",
            kind(other)
        )),
        None => Err(format!("missing field `{key}`")),
    }
}

fn optional_string(fields: &mut Map<String, Value>, key: &str) -> Result<(), String> {
    match fields.get(key) {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Null) => {
            fields.remove(key);
            Ok(())
        }
        Some(other) => Err(format!(
            "field `{key}` must be a string, got {}",
            kind(other)
        )),
    }
}

/// A list of strings, given as a list or as a JSON string holding one.
fn normalise_list(
    fields: &mut Map<String, Value>,
    key: &str,
    required: bool,
) -> Result<(), String> {
    let value = match fields.get(key) {
        None | Some(Value::Null) if !required => return Ok(()),
        None | Some(Value::Null) => return Err(format!("missing field `{key}`")),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .map_err(|e| format!("field `{key}` is a string but not a JSON list: {e}"))?,
        Some(v) => v.clone(),
    };
    match value {
        Value::Array(items) if items.iter().all(Value::is_string) => {
            fields.insert(key.to_owned(), Value::Array(items));
            Ok(())
        }
        other => Err(format!(
            "field `{key}` must be a list of test ids, got {}",
            kind(&other)
        )),
    }
}

/// An object, given as an object or as a JSON string holding one.
fn normalise_object(fields: &mut Map<String, Value>, key: &str) -> Result<(), String> {
    let value = match fields.get(key) {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .map_err(|e| format!("field `{key}` is a string but not JSON: {e}"))?,
        Some(v) => v.clone(),
    };
    if !value.is_object() {
        return Err(format!(
            "field `{key}` must be an object, got {}",
            kind(&value)
        ));
    }
    fields.insert(key.to_owned(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn swe_row() -> Value {
        json!({"instance_id": "a__b-1", "repo": "a/b", "base_commit": "abc", "problem_statement": "bug",
               "patch": "diff", "test_patch": "diff", "version": "1.0",
               "FAIL_TO_PASS": "[\"t::x\"]", "PASS_TO_PASS": ["t::y"]})
    }

    #[test]
    fn swe_bench_lists_are_normalised_and_missing_fields_named() {
        let m = Layout::SweBench.map(1, obj(swe_row())).unwrap();
        assert_eq!(m.id, "a__b-1");
        assert_eq!(m.metadata["FAIL_TO_PASS"], json!(["t::x"]));
        assert_eq!(m.metadata["PASS_TO_PASS"], json!(["t::y"]));
        let mut row = obj(swe_row());
        row.remove("base_commit");
        assert_eq!(
            Layout::SweBench.map(1, row).unwrap_err(),
            "missing field `base_commit`"
        );
        let mut row = obj(swe_row());
        row.insert("FAIL_TO_PASS".into(), json!("not json"));
        assert!(Layout::SweBench
            .map(1, row)
            .unwrap_err()
            .contains("FAIL_TO_PASS"));
    }

    #[test]
    fn swe_rebench_reads_install_config_and_extra_lists() {
        let mut row = obj(swe_row());
        row.insert("install_config".into(), json!("{\"python\": \"3.11\"}"));
        row.insert("FAIL_TO_FAIL".into(), json!("[]"));
        let m = Layout::SweRebench.map(1, row).unwrap();
        assert_eq!(m.metadata["install_config"]["python"], "3.11");
        assert_eq!(m.metadata["FAIL_TO_FAIL"], json!([]));
    }

    #[test]
    fn r2e_gym_search_qa_and_plain() {
        let m = Layout::R2eGym
            .map(1, obj(json!({"docker_image": "namanjain12/orange3_final:abc123", "problem_statement": "p"})))
            .unwrap();
        assert_eq!(m.id, "orange3_final__abc123");
        assert_eq!(m.metadata["image"], "namanjain12/orange3_final:abc123");
        let m = Layout::SearchQa
            .map(7, obj(json!({"question": "q", "golden_answers": "x"})))
            .unwrap();
        assert_eq!(m.id, "row-7");
        assert_eq!(m.metadata["golden_answers"], json!(["x"]));
        let err = Layout::SearchQa
            .map(1, obj(json!({"question": "q", "golden_answers": []})))
            .unwrap_err();
        assert!(err.contains("golden_answers"), "{err}");
        let m = Layout::Plain
            .map(1, obj(json!({"id": "t", "messages": [{"role": "user", "content": "hi"}], "metadata": {"k": 1}})))
            .unwrap();
        assert_eq!(m.messages.unwrap().len(), 1);
        assert!(Layout::Plain
            .map(1, obj(json!({"id": "t", "extra": 1})))
            .unwrap_err()
            .contains("extra"));
    }
}
