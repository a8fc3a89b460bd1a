//! `uniagent parse-log` and `uniagent grade`: the thin commands over uniagent-rewards' swebench
//! parsers and fresh-sandbox grading (their parity and tamper-proofing are tested in that crate;
//! here: the command-line contract, and grading the repository's swe-mini dataset in Docker).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{error_line, jsonl, repo_root, run_in, stderr, write};
use serde_json::{json, Value};

const PYTEST_LOG: &str = "\
============================= test session starts ==============================
collected 3 items

tests/test_a.py .F.                                                      [100%]

=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_three
FAILED tests/test_a.py::test_two - assert 1 == 2
========================= 1 failed, 2 passed in 0.01s ==========================
";

/// `uniagent parse-log --parser PARSER --log LOG`, run in `dir`.
fn parse_log(dir: &Path, parser: &str, log: &Path) -> Output {
    run_in(
        dir,
        &[
            "parse-log",
            "--parser",
            parser,
            "--log",
            log.to_str().unwrap(),
        ],
    )
}

#[test]
fn parse_log_prints_the_statuses_as_one_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(dir.path(), "test.log", PYTEST_LOG);
    let expected = json!({
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_three": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
    });
    for name in ["parse_log_pytest", "pytest"] {
        let out = parse_log(dir.path(), name, &log);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
        let got: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(got, expected, "{name}");
    }
    // Nothing parses: an empty object, not an error.
    let empty = write(dir.path(), "empty.log", "no tests here\n");
    let out = parse_log(dir.path(), "pytest", &empty);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "{}");
}

#[test]
fn parse_log_bad_usage_exits_2_with_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(dir.path(), "test.log", PYTEST_LOG);
    let out = parse_log(dir.path(), "parse_log_nope", &log);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(error_line(&out).starts_with("error: "), "{}", stderr(&out));
    assert!(
        error_line(&out).contains("parse_log_nope"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());

    let out = parse_log(dir.path(), "pytest", Path::new("/no/such/log"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        error_line(&out).contains("/no/such/log"),
        "{}",
        stderr(&out)
    );
}

/// Writes `preds.jsonl` in `dir`: one prediction per `(instance_id, model_patch)`.
fn write_predictions<'a>(
    dir: &Path,
    preds: impl IntoIterator<Item = (String, &'a str)>,
    model: &str,
) -> std::path::PathBuf {
    let mut text = String::new();
    for (id, patch) in preds {
        text.push_str(
            &json!({"instance_id": id, "model_patch": patch, "model_name_or_path": model})
                .to_string(),
        );
        text.push('\n');
    }
    write(dir, "preds.jsonl", &text)
}

/// `uniagent grade --dataset DATASET --predictions PREDS [EXTRA...]` in `dir`, not yet run.
fn grade_command(
    dir: &Path,
    dataset: &Path,
    preds: &Path,
    extra: &[&str],
) -> std::process::Command {
    let mut cmd = common::uniagent();
    cmd.current_dir(dir)
        .args([
            "grade",
            "--dataset",
            dataset.to_str().unwrap(),
            "--predictions",
            preds.to_str().unwrap(),
        ])
        .args(extra);
    cmd
}

#[test]
fn grade_rejects_predictions_for_unknown_instances_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = repo_root().join("datasets/swe-mini/tasks.jsonl");
    let preds = write_predictions(dir.path(), [("no-such-task".to_owned(), "")], "m");
    let out = grade_command(
        dir.path(),
        &dataset,
        &preds,
        &["--image", "uniagent-swe-mini:{instance_id}"],
    )
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        error_line(&out).contains("no-such-task"),
        "{}",
        stderr(&out)
    );
}

/// A patch that applies and fixes nothing.
const WRONG_PATCH: &str = "diff --git a/NOTES.txt b/NOTES.txt
new file mode 100644
--- /dev/null
+++ b/NOTES.txt
@@ -0,0 +1 @@
+nothing fixed here
";

#[test]
fn grade_resolves_gold_patches_and_not_empty_or_wrong_ones_in_docker() {
    if common::skip_without_docker() {
        return;
    }
    let dataset = repo_root().join("datasets/swe-mini/tasks.jsonl");
    let rows = jsonl(&dataset);
    assert!(rows.len() >= 6);
    // Gold patches for all but the last two tasks; an empty patch and a wrong one for those.
    let n = rows.len();
    let id = |i: usize| rows[i]["instance_id"].as_str().unwrap().to_owned();
    let patch = |i: usize| {
        if i == n - 2 {
            ""
        } else if i == n - 1 {
            WRONG_PATCH
        } else {
            rows[i]["patch"].as_str().unwrap()
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let preds = write_predictions(dir.path(), (0..n).map(|i| (id(i), patch(i))), "test-model");
    let run_id = format!("test-grade-{}-{:x}", std::process::id(), fastrand::u32(..));
    let grade = || {
        grade_command(
            dir.path(),
            &dataset,
            &preds,
            &[
                "--out",
                "out",
                "--concurrency",
                "3",
                "--image",
                "uniagent-swe-mini:{instance_id}",
            ],
        )
        .env("UNIAGENT_RUN_ID", &run_id)
        .output()
        .unwrap()
    };
    let out = grade();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/report.json")).unwrap())
            .unwrap();
    assert_eq!(report, on_disk);
    let ids = |key: &str| ids_of(&report, key);
    let mut gold: Vec<String> = (0..n - 2).map(id).collect();
    gold.sort();
    assert_eq!(ids("resolved_ids"), gold, "{report}");
    assert_eq!(ids("empty_patch_ids"), vec![id(n - 2)], "{report}");
    assert_eq!(ids("unresolved_ids"), vec![id(n - 1)], "{report}");
    assert!(ids("error_ids").is_empty(), "{report}");
    assert_eq!(report["submitted_instances"], json!(n));

    // Rerunning resumes: the same report, nothing graded again.
    let again = grade();
    assert!(again.status.success(), "{}", stderr(&again));
    let report2: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(ids_of(&report2, "resolved_ids"), ids("resolved_ids"));

    // No container of this run is left.
    let left = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.uniagent.run-id={run_id}"),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "containers left: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

#[test]
fn grade_resolves_r2e_gym_rows_by_their_hidden_tests_in_docker() {
    if common::skip_without_docker() {
        return;
    }
    // R2E-Gym's layout: no instance_id (the image's tag stands in), no test_cmd, no test
    // lists; the images' run_tests.sh and /r2e_tests decide (scripts/setup/55-*).
    let dataset = repo_root().join("datasets/swe-mini-r2e/tasks.jsonl");
    let rows = jsonl(&dataset);
    let id = |row: &Value| row["docker_image"].as_str().unwrap().replace(':', "__");
    let rows = &rows[..3];
    let patches = [rows[0]["patch"].as_str().unwrap(), "", WRONG_PATCH];
    let dir = tempfile::tempdir().unwrap();
    let preds = write_predictions(dir.path(), rows.iter().map(id).zip(patches), "m");
    let out = grade_command(
        dir.path(),
        &dataset,
        &preds,
        &["--out", "out", "--concurrency", "2"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids_of(&report, "resolved_ids"), [id(&rows[0])], "{report}");
    assert_eq!(
        ids_of(&report, "empty_patch_ids"),
        [id(&rows[1])],
        "{report}"
    );
    assert_eq!(
        ids_of(&report, "unresolved_ids"),
        [id(&rows[2])],
        "{report}"
    );
    assert!(ids_of(&report, "error_ids").is_empty(), "{report}");
}

fn ids_of(report: &Value, key: &str) -> Vec<String> {
    let mut v: Vec<String> = report[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}
