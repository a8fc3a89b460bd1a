//! Bad input: exit code 2 before any sandbox starts, with one `error:` line naming what to
//! change (file, line, key, row). Good input with `--dry-run`: exit 0, tasks on stdout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{error_line, run_in, stderr, write};

const DATASET: &str =
    "{\"id\": \"t1\", \"metadata\": {\"question\": \"Who?\", \"golden_answers\": [\"me\"]}}\n\
{\"id\": \"t2\", \"metadata\": {\"question\": \"What?\", \"golden_answers\": [\"it\"]}}\n";

fn config(model_url: &str, extra: &str) -> String {
    format!(
        "tasks:\n  path: tasks.jsonl\n  template: \"Q: {{{{ question }}}}\"\nenvironment:\n  type: command\n  reward:\n    command: \"true\"\n\
model:\n  type: openai\n  http:\n    endpoints: [\"{model_url}\"]\n    model: m\n{extra}"
    )
}

fn setup(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tasks.jsonl", DATASET);
    write(
        dir.path(),
        "run.yaml",
        &config("http://127.0.0.1:9/v1", extra),
    );
    dir
}

/// Exit 2, one error line, nothing written to the output directory.
fn assert_bad(dir: &std::path::Path, args: &[&str], needles: &[&str]) -> String {
    let out = run_in(dir, args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let line = error_line(&out);
    assert!(line.starts_with("error: "), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "more than one line: {err}");
    for n in needles {
        assert!(line.contains(n), "`{n}` not in: {line}");
    }
    assert!(
        !dir.join("runs").exists(),
        "something was written before the check failed"
    );
    line
}

#[test]
fn unknown_keys_name_file_line_and_key() {
    let dir = setup("loop:\n  max_turns: 3\n  max_turn: 4\n");
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["run.yaml:15", "loop", "max_turn"],
    );
    let dir = setup("runner:\n  samples: 2\n");
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["run.yaml:14", "samples"],
    );
    let dir = setup("extra_section: 1\n");
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["run.yaml:13", "extra_section"],
    );
}

#[test]
fn wrong_types_name_the_key() {
    let dir = setup("loop:\n  max_turns: many\n");
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["run.yaml:14", "loop.max_turns", "invalid type"],
    );
    let dir = setup("");
    assert_bad(
        dir.path(),
        &["run", "run.yaml", "--set", "runner.samples_per_task=lots"],
        &[
            "--set runner.samples_per_task=lots",
            "runner.samples_per_task",
        ],
    );
    assert_bad(
        dir.path(),
        &["run", "run.yaml", "--set", "novalue"],
        &["--set", "KEY=VALUE"],
    );
}

#[test]
fn toml_configs_get_lines_too() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tasks.jsonl", DATASET);
    let text = "[tasks]\npath = \"tasks.jsonl\"\ntemplate = \"{{ question }}\"\n\n[environment]\ntype = \"command\"\nreward = { command = \"true\" }\n\n\
[model]\ntype = \"openai\"\nhttp = { endpoints = [\"http://127.0.0.1:9/v1\"], model = \"m\" }\n\n[loop]\nmax_turns = 2\nmax_turnz = 2\n";
    write(dir.path(), "run.toml", text);
    assert_bad(
        dir.path(),
        &["run", "run.toml"],
        &["run.toml:15", "max_turnz"],
    );
}

#[test]
fn missing_dataset_fields_are_named_with_the_row() {
    let dir = setup("");
    write(
        dir.path(),
        "tasks.jsonl",
        &format!("{DATASET}{{\"id\": \"t3\", \"metadata\": {{\"golden_answers\": []}}}}\n"),
    );
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["tasks.jsonl row 3", "question"],
    );
    let dir = setup("");
    let cfg = config("http://127.0.0.1:9/v1", "").replace(
        "  template: \"Q: {{ question }}\"\n",
        "  layout: swe-bench\n",
    );
    write(dir.path(), "run.yaml", &cfg);
    write(
        dir.path(),
        "tasks.jsonl",
        "{\"instance_id\": \"a\", \"repo\": \"r\", \"problem_statement\": \"p\"}\n",
    );
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &[
            "tasks.jsonl row 1",
            "missing field `base_commit`",
            "swe-bench",
        ],
    );
    let dir = setup("");
    write(
        dir.path(),
        "tasks.jsonl",
        "{\"id\": \"x\", \"metadata\": {\"question\": \"q\"}}\n",
    );
    let cfg = config("http://127.0.0.1:9/v1", "").replace("command: \"true\"", "command: null");
    write(dir.path(), "run.yaml", &cfg);
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["task `x`", "reward_command"],
    );
}

#[test]
fn an_unreachable_model_fails_before_anything_starts() {
    let dir = setup("");
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["http://127.0.0.1:9/v1", "unreachable"],
    );
}

#[test]
fn a_missing_image_fails_before_any_sandbox_starts() {
    let dir = setup("");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let cfg = config(&url, "").replace(
        "  type: command\n",
        "  type: command\n  sandbox:\n    type: docker\n    image: \"uniagent-no-such-image:{id}\"\n",
    );
    write(dir.path(), "run.yaml", &cfg);
    let out = run_in(dir.path(), &["run", "run.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let line = error_line(&out);
    if common::docker_available() {
        assert!(
            line.contains("image `uniagent-no-such-image:t1`") && line.contains("does not exist"),
            "{line}"
        );
    } else {
        assert!(line.contains("Docker"), "{line}");
    }
    assert!(!dir.path().join("runs").exists());
}

#[test]
fn unknown_environment_and_usage_errors() {
    let dir = setup("");
    let cfg = config("http://127.0.0.1:9/v1", "").replace("type: command", "type: nope");
    write(dir.path(), "run.yaml", &cfg);
    assert_bad(
        dir.path(),
        &["run", "run.yaml"],
        &["environment.type", "unknown environment `nope`", "swe"],
    );
    let out = run_in(dir.path(), &["run", "run.yaml", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run_in(dir.path(), &["run", "missing.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        error_line(&out).contains("missing.yaml"),
        "{}",
        stderr(&out)
    );
    let out = run_in(dir.path(), &["train", "run.yaml", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn dry_run_and_help_exit_zero() {
    let dir = setup("");
    let out = run_in(
        dir.path(),
        &["run", "run.yaml", "--dry-run", "--limit", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["id"], "t1");
    assert_eq!(lines[0]["messages"][0]["content"], "Q: Who?");
    for args in [&["--help"][..], &["run", "--help"], &["train", "--help"]] {
        let out = run_in(dir.path(), args);
        assert_eq!(out.status.code(), Some(0));
    }
}

#[test]
fn absurdly_nested_configs_fail_fast_naming_the_line() {
    // 100,000 levels of flow nesting in an otherwise valid config: the YAML parser took over
    // 30 s on this before a limit applied; it is now refused before parsing.
    let deep = format!("extra: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let dir = setup(&deep);
    assert_bad(
        dir.path(),
        &["run", "run.yaml", "--dry-run"],
        &["run.yaml:13", "nest more than 64 levels"],
    );
}
