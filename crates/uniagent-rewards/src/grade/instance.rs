//! Task instances (SWE-bench, SWE-bench-style, SWE-rebench) and predictions, as the harness
//! reads them.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::RewardError;
use crate::r2e::R2eStatusMap;
use crate::swebench::{specs, EvalType, Parser, TestGroups};

/// How an instance's test run is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "format")]
pub enum TaskFormat {
    /// SWE-bench (and SWE-rebench): `test_patch` applied, `test_cmd` run, its log parsed by
    /// `parser`, `FAIL_TO_PASS` / `PASS_TO_PASS` graded ([`crate::swebench`]).
    SweBench,
    /// R2E-Gym: the image's hidden tests (`/r2e_tests`) run by its `run_tests.sh`; the parsed
    /// map must equal `expected_output_json` ([`crate::r2e`]).
    R2eGym {
        /// `expected_output_json`: test name → status.
        expected: R2eStatusMap,
    },
}

/// One task instance to grade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweInstance {
    /// `instance_id`
    pub instance_id: String,
    /// `repo` (`owner/name`); picks the log parser when none is given.
    pub repo: String,
    /// `base_commit`: the commit the patches apply to.
    pub base_commit: String,
    /// `patch`: the gold patch (empty when the dataset has none).
    pub patch: String,
    /// `test_patch`: the tests the grading adds, applied from these bytes.
    pub test_patch: String,
    /// `FAIL_TO_PASS`, `PASS_TO_PASS` (and SWE-rebench's `FAIL_TO_FAIL`, `PASS_TO_FAIL`).
    pub tests: TestGroups,
    /// The log parser: `install_config.log_parser` or `log_parser`, else the package's parser
    /// for `repo`, else `parse_log_pytest`.
    pub parser: Parser,
    /// The test command: `install_config.test_cmd` or `test_cmd`.
    pub test_cmd: String,
    /// The repository in the sandbox: `repo_dir`, default `/testbed`.
    pub repo_dir: String,
    /// The sandbox image: `image_name`, `docker_image` or `image`, when the dataset names one.
    pub image: Option<String>,
    /// `eval_type` (`pass_and_fail` unless the dataset says `fail_only`).
    pub eval_type: EvalType,
    /// SWE-bench or R2E-Gym grading (a row with `expected_output_json` is R2E-Gym's).
    pub format: TaskFormat,
}

/// A task's metadata as a dataset row, with the task id as `instance_id` when the row has none.
pub(crate) fn task_row(task: &uniagent_core::Task) -> Value {
    let mut row = Value::Object(task.metadata.clone());
    if row.get("instance_id").is_none() {
        row["instance_id"] = Value::String(task.id.clone());
    }
    row
}

impl SweInstance {
    /// Reads one dataset row. Test lists may be lists or JSON strings holding lists.
    ///
    /// A row with `expected_output_json` is an R2E-Gym row: `instance_id` defaults to the
    /// image's tag, `repo` to `repo_name`, `base_commit` to `parsed_commit_content`'s
    /// `old_commit_hash` (the commit the image's repository is at), and no `test_cmd` is
    /// needed (the image's `run_tests.sh` is the test command).
    pub fn from_json(row: &Value) -> Result<Self, RewardError> {
        if let Some(expected) = row.get("expected_output_json").filter(|v| !v.is_null()) {
            return Self::from_r2e_gym(row, expected);
        }
        let install = row.get("install_config").filter(|v| !v.is_null());
        let field = |name: &str| -> Result<Option<String>, RewardError> {
            match row.get(name).or_else(|| install.and_then(|i| i.get(name))) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(bad(name, "must be a string")),
            }
        };
        let required = |name: &str| -> Result<String, RewardError> {
            field(name)?.ok_or_else(|| RewardError::MissingMetadata { field: name.into() })
        };
        let instance_id = required("instance_id")?;
        let repo = field("repo")?.unwrap_or_default();
        let parser = match install
            .and_then(|i| i.get("log_parser"))
            .or_else(|| row.get("log_parser"))
        {
            Some(Value::String(name)) => name.parse()?,
            Some(Value::Null) | None => Parser::for_repo(&repo).unwrap_or(Parser::Pytest),
            Some(_) => return Err(bad("log_parser", "must be a string")),
        };
        let test_cmd = match install
            .and_then(|i| i.get("test_cmd"))
            .or_else(|| row.get("test_cmd"))
        {
            Some(Value::String(cmd)) => cmd.clone(),
            // SWE-rebench lists commands; they run in order.
            Some(Value::Array(cmds)) => cmds
                .iter()
                .map(|c| {
                    c.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| bad("test_cmd", "must hold strings"))
                })
                .collect::<Result<Vec<_>, _>>()?
                .join("\n"),
            // No command of its own: the harness's spec table for (repo, version).
            _ => match version(row).and_then(|v| {
                let test_patch = field("test_patch").ok().flatten().unwrap_or_default();
                specs::test_script(&repo, &v, &test_patch)
            }) {
                Some(cmd) => cmd,
                None => {
                    return Err(RewardError::MissingMetadata {
                        field: "test_cmd".into(),
                    })
                }
            },
        };
        let eval_type = match field("eval_type")?.as_deref() {
            None | Some("pass_and_fail") => EvalType::PassAndFail,
            Some("fail_only") => EvalType::FailOnly,
            Some(other) => return Err(bad("eval_type", &format!("unknown value `{other}`"))),
        };
        Ok(Self {
            repo,
            base_commit: required("base_commit")?,
            patch: field("patch")?.unwrap_or_default(),
            test_patch: field("test_patch")?.unwrap_or_default(),
            tests: TestGroups {
                fail_to_pass: test_list(row, "FAIL_TO_PASS")?,
                pass_to_pass: test_list(row, "PASS_TO_PASS")?,
                fail_to_fail: test_list(row, "FAIL_TO_FAIL")?,
                pass_to_fail: test_list(row, "PASS_TO_FAIL")?,
            },
            parser,
            test_cmd,
            repo_dir: field("repo_dir")?.unwrap_or_else(|| "/testbed".into()),
            image: match field("image_name")? {
                Some(image) => Some(image),
                None => match field("docker_image")? {
                    Some(image) => Some(image),
                    None => field("image")?,
                },
            },
            eval_type,
            instance_id,
            format: TaskFormat::SweBench,
        })
    }

    fn from_r2e_gym(row: &Value, expected: &Value) -> Result<Self, RewardError> {
        let string = |name: &str| -> Result<Option<String>, RewardError> {
            match row.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(bad(name, "must be a string")),
            }
        };
        let expected = json_object(expected, "expected_output_json")?;
        let expected = expected
            .iter()
            .map(|(name, status)| match status {
                Value::String(s) => Ok((name.clone(), s.clone())),
                _ => Err(bad("expected_output_json", "statuses must be strings")),
            })
            .collect::<Result<R2eStatusMap, _>>()?;
        let image = string("docker_image")?.or(string("image")?);
        let instance_id = match (string("instance_id")?, &image) {
            (Some(id), _) => id,
            (None, Some(image)) => image.rsplit('/').next().unwrap_or(image).replace(':', "__"),
            (None, None) => {
                return Err(RewardError::MissingMetadata {
                    field: "instance_id".into(),
                })
            }
        };
        let base_commit = match string("base_commit")? {
            Some(commit) => commit,
            None => match row.get("parsed_commit_content").filter(|v| !v.is_null()) {
                Some(parsed) => json_object(parsed, "parsed_commit_content")?
                    .get("old_commit_hash")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| bad("parsed_commit_content", "has no `old_commit_hash`"))?,
                None => {
                    return Err(RewardError::MissingMetadata {
                        field: "base_commit".into(),
                    })
                }
            },
        };
        Ok(Self {
            instance_id,
            repo: string("repo_name")?.or(string("repo")?).unwrap_or_default(),
            base_commit,
            patch: string("patch")?.unwrap_or_default(),
            test_patch: String::new(),
            tests: TestGroups::default(),
            parser: Parser::Pytest,
            test_cmd: String::new(),
            repo_dir: string("repo_dir")?.unwrap_or_else(|| "/testbed".into()),
            image,
            eval_type: EvalType::PassAndFail,
            format: TaskFormat::R2eGym { expected },
        })
    }
}

/// A JSON object, or a string holding one (R2E-Gym stores its objects as JSON strings).
fn json_object(value: &Value, field: &str) -> Result<serde_json::Map<String, Value>, RewardError> {
    let parsed = match value {
        Value::String(text) => serde_json::from_str::<Value>(text)
            .map_err(|e| bad(field, &format!("not a JSON object: {e}")))?,
        other => other.clone(),
    };
    match parsed {
        Value::Object(map) => Ok(map),
        _ => Err(bad(field, "must be a JSON object")),
    }
}

/// `version` as the spec table keys it (a string; a number as written, `3.0` → `"3.0"`).
fn version(row: &Value) -> Option<String> {
    match row.get("version")? {
        Value::String(v) => Some(v.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn bad(field: &str, message: &str) -> RewardError {
    RewardError::BadMetadata {
        field: field.into(),
        message: message.into(),
    }
}

/// A list of test ids: a JSON list, or a string holding one. Absent means empty.
fn test_list(row: &Value, field: &str) -> Result<Vec<String>, RewardError> {
    let parsed;
    let list = match row.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) => {
            parsed = serde_json::from_str::<Value>(text)
                .map_err(|e| bad(field, &format!("not a JSON list of test ids: {e}")))?;
            &parsed
        }
        Some(other) => other,
    };
    let Value::Array(items) = list else {
        return Err(bad(field, "must be a list of test ids"));
    };
    items
        .iter()
        .map(|i| {
            i.as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad(field, "test ids must be strings"))
        })
        .collect()
}

/// One line of a predictions file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    /// `instance_id`
    pub instance_id: String,
    /// `model_patch`; `None` or empty is an empty patch.
    pub model_patch: Option<String>,
    /// `model_name_or_path`
    pub model_name_or_path: String,
}

/// Rows of a JSON array or a JSON Lines text.
fn rows(text: &str, what: &str) -> Result<Vec<Value>, RewardError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed).map_err(|e| bad(what, &e.to_string()));
    }
    trimmed
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| bad(what, &format!("line {}: {e}", i + 1)))
        })
        .collect()
}

/// Reads a dataset (JSON array or JSONL).
pub fn load_dataset(path: &Path) -> Result<Vec<SweInstance>, RewardError> {
    let text = read(path)?;
    rows(&text, &path.display().to_string())?
        .iter()
        .map(SweInstance::from_json)
        .collect()
}

/// Reads predictions (JSON array, JSONL, or the harness's `{instance_id: prediction}` object).
pub fn load_predictions(path: &Path) -> Result<Vec<Prediction>, RewardError> {
    let text = read(path)?;
    let what = path.display().to_string();
    let values = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) if !map.contains_key("instance_id") => {
            map.into_iter().map(|(_, v)| v).collect()
        }
        _ => rows(&text, &what)?,
    };
    values
        .into_iter()
        .map(|v| serde_json::from_value(v).map_err(|e| bad(&what, &e.to_string())))
        .collect()
}

fn read(path: &Path) -> Result<String, RewardError> {
    std::fs::read_to_string(path).map_err(|e| RewardError::BadMetadata {
        field: path.display().to_string(),
        message: format!("cannot read: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn swe_bench_and_swe_rebench_rows() {
        let row = json!({
            "instance_id": "a__b-1", "repo": "django/django", "base_commit": "abc",
            "patch": "p", "test_patch": "t", "FAIL_TO_PASS": "[\"x (m.C)\"]", "PASS_TO_PASS": [],
            "test_cmd": "./tests/runtests.py"
        });
        let inst = SweInstance::from_json(&row).unwrap();
        assert_eq!(inst.parser, Parser::Django);
        assert_eq!(inst.tests.fail_to_pass, ["x (m.C)"]);
        assert_eq!(inst.repo_dir, "/testbed");
        let rebench = json!({
            "instance_id": "r-1", "repo": "o/r", "base_commit": "abc", "test_patch": "",
            "FAIL_TO_PASS": ["t"], "FAIL_TO_FAIL": ["u"], "PASS_TO_FAIL": [],
            "install_config": {"log_parser": "parse_log_pytest_v2", "test_cmd": ["pytest -rA a", "pytest -rA b"]},
            "docker_image": "img:1"
        });
        let inst = SweInstance::from_json(&rebench).unwrap();
        assert_eq!(inst.parser, Parser::PytestV2);
        assert_eq!(inst.test_cmd, "pytest -rA a\npytest -rA b");
        assert_eq!(inst.tests.fail_to_fail, ["u"]);
        assert_eq!(inst.image.as_deref(), Some("img:1"));
        let err =
            SweInstance::from_json(&json!({"instance_id": "x", "base_commit": "a"})).unwrap_err();
        assert!(err.to_string().contains("test_cmd"), "{err}");
    }

    #[test]
    fn rows_without_test_cmd_use_the_harness_spec_table() {
        let row = json!({
            "instance_id": "django__django-1", "repo": "django/django", "version": "3.0",
            "base_commit": "abc", "FAIL_TO_PASS": [], "PASS_TO_PASS": [],
            "test_patch": "diff --git a/tests/queries/test_q.py b/tests/queries/test_q.py\n"
        });
        let inst = SweInstance::from_json(&row).unwrap();
        assert!(
            inst.test_cmd
                .ends_with("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 queries.test_q"),
            "{}",
            inst.test_cmd
        );
        let mut unknown = row;
        unknown["version"] = json!("0.0");
        let err = SweInstance::from_json(&unknown).unwrap_err();
        assert!(err.to_string().contains("test_cmd"), "{err}");
    }

    #[test]
    fn r2e_gym_rows() {
        let row = json!({
            "docker_image": "namanjain12/orange3_final:abc123", "repo_name": "orange3",
            "commit_hash": "abc123", "problem_statement": "p",
            "parsed_commit_content": "{\"old_commit_hash\": \"old1\", \"new_commit_hash\": \"abc123\"}",
            "expected_output_json": "{\"test_a\": \"PASSED\", \"TestX.test_b\": \"FAILED\"}"
        });
        let inst = SweInstance::from_json(&row).unwrap();
        assert_eq!(inst.instance_id, "orange3_final__abc123");
        assert_eq!(inst.base_commit, "old1");
        assert_eq!(inst.repo, "orange3");
        assert_eq!(
            inst.image.as_deref(),
            Some("namanjain12/orange3_final:abc123")
        );
        let TaskFormat::R2eGym { expected } = &inst.format else {
            panic!("{inst:?}")
        };
        assert_eq!(
            expected.get("TestX.test_b").map(String::as_str),
            Some("FAILED")
        );
        let mut no_base = row.clone();
        no_base
            .as_object_mut()
            .unwrap()
            .remove("parsed_commit_content");
        let err = SweInstance::from_json(&no_base).unwrap_err();
        assert!(err.to_string().contains("base_commit"), "{err}");
        let mut bad_status = row;
        bad_status["expected_output_json"] = json!({"t": 1});
        assert!(SweInstance::from_json(&bad_status).is_err());
    }
}
