//! `uniagent run` on host file-lookup tasks with a model that solves some tasks, answers others
//! wrongly and never finishes the rest; then `uniagent report` (table and `--json`) and the
//! `report` of `summary.json`, checked against the numbers recomputed here from
//! `trajectories.jsonl`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::{assistant_turns, jsonl, run_in, stderr, tool_call, write, ChatServer};
use serde_json::{json, Value};

/// What the scripted model does with a task, decided by the name it asks about.
fn behaviour(target: &str) -> &'static str {
    match target.chars().next().unwrap_or('z') {
        'a'..='h' => "solve",
        'i'..='o' => "wrong",
        _ => "loop",
    }
}

/// Reads the asked file, then answers: the code read (solve), a wrong code (wrong), or reads
/// again until the turn limit (loop).
fn responder() -> common::Responder {
    Arc::new(|body: &Value| {
        let target = common::asked_file(body);
        let read = || {
            tool_call(
                "c0",
                "execute_bash",
                json!({"command": format!("cat data/{target}.txt")}),
            )
        };
        if assistant_turns(body) == 0 {
            return read();
        }
        let observed: String = body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        match behaviour(&target) {
            "solve" => tool_call("c1", "finish", json!({"answer": observed})),
            "wrong" => tool_call("c1", "finish", json!({"answer": "0"})),
            _ => read(),
        }
    })
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_of_a_host_run_matches_its_trajectories() {
    let server = ChatServer::start(responder()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "tasks:\n  generate: {{count: 10, seed: 3}}\n\
environment:\n  type: file-lookup\n  sandbox: {{type: host}}\n\
model:\n  type: openai\n  http: {{endpoints: [\"{}\"], model: replay, timeout: 30}}\n\
loop:\n  max_turns: 3\n\
runner:\n  samples_per_task: 2\n  max_concurrent_rollouts: 4\n",
        server.base_url
    );
    write(dir.path(), "run.yaml", &config);
    let path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        run_in(&path, &["run", "run.yaml", "--out", "out", "--quiet"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let outdir = dir.path().join("out");
    let lines = jsonl(&outdir.join("trajectories.jsonl"));
    assert_eq!(lines.len(), 20);

    // The expected numbers, from the lines themselves.
    let solved: Vec<&Value> = lines
        .iter()
        .filter(|l| l["reward"]["success"] == true)
        .collect();
    let mut policy: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines.iter().filter(|l| l["reward"]["success"] != true) {
        *policy
            .entry(l["exit_reason"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    // The run has all three outcomes, so every count below means something.
    assert!(
        !solved.is_empty() && solved.len() < 20,
        "{} solved",
        solved.len()
    );
    assert!(
        policy.contains_key("finished") && policy.contains_key("max_turns"),
        "{policy:?}"
    );
    // The wrong answers are recorded next to the expected ones.
    let wrong = lines
        .iter()
        .find(|l| l["exit_reason"] == "finished" && l["reward"]["success"] == false)
        .unwrap();
    assert_eq!(wrong["reward"]["details"]["given"], "0", "{wrong}");
    assert!(
        wrong["reward"]["details"]["expected"]
            .as_str()
            .unwrap()
            .len()
            == 3,
        "{wrong}"
    );
    let tasks: BTreeSet<&str> = lines
        .iter()
        .map(|l| l["task_id"].as_str().unwrap())
        .collect();
    let tokens = mean(
        &solved
            .iter()
            .map(|l| l["counts"]["sampled_tokens"].as_f64().unwrap())
            .collect::<Vec<_>>(),
    );
    let tools = mean(
        &solved
            .iter()
            .map(|l| l["counts"]["tool_calls"].as_f64().unwrap())
            .collect::<Vec<_>>(),
    );
    let wall = mean(
        &solved
            .iter()
            .map(|l| l["timings"]["total"].as_f64().unwrap())
            .collect::<Vec<_>>(),
    );
    // The scripted server reports 5 completion tokens per call; a success took two calls.
    assert_eq!(tokens, 10.0);
    assert!(tools >= 1.0, "{tools}");

    let check = |r: &Value| {
        assert_eq!(r["source"], "run", "{r}");
        assert_eq!(r["tasks_attempted"], tasks.len() as u64, "{r}");
        assert_eq!(r["rollouts"], 20, "{r}");
        assert_eq!(r["successes"], solved.len() as u64, "{r}");
        assert_eq!(
            r["strict_success_rate"].as_f64().unwrap(),
            solved.len() as f64 / 20.0,
            "{r}"
        );
        assert_eq!(
            r["policy_failures"]["total"],
            20 - solved.len() as u64,
            "{r}"
        );
        assert_eq!(r["policy_failures"]["by_reason"], json!(policy), "{r}");
        assert_eq!(r["infrastructure_failures"]["total"], 0, "{r}");
        assert_eq!(
            r["per_success"]["tokens_generated"].as_f64().unwrap(),
            tokens
        );
        assert_eq!(r["per_success"]["tool_calls"].as_f64().unwrap(), tools);
        assert!((r["per_success"]["wall_time_s"].as_f64().unwrap() - wall).abs() < 1e-9);
        assert!(r.get("training").is_none(), "{r}");
    };

    // `report --json`: one object per directory, with `dir`.
    let path = dir.path().to_path_buf();
    let out = run_in(
        &path,
        &["report", "--json", "out", "out/trajectories.jsonl"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reports: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["dir"], "out");
    check(&reports[0]);
    check(&reports[1]);

    // summary.json carries the same report.
    let summary: Value =
        serde_json::from_slice(&std::fs::read(outdir.join("summary.json")).unwrap()).unwrap();
    check(&summary["report"]);

    // The table: a column per directory, the numbers as they are.
    let out = run_in(&path, &["report", "out", "out"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = String::from_utf8(out.stdout).unwrap();
    let row = |label: &str| -> Vec<String> {
        let line = table
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label} in\n{table}"));
        line[label.len()..]
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let rate = format!("{:.1}%", 100.0 * solved.len() as f64 / 20.0);
    assert_eq!(row("strict success rate"), [rate.clone(), rate], "{table}");
    assert_eq!(row("rollouts"), ["20", "20"], "{table}");
    let max_turns = policy["max_turns"].to_string();
    assert_eq!(
        row("  max_turns"),
        [max_turns.clone(), max_turns],
        "{table}"
    );
    let tools = format!("{tools:.2}");
    assert_eq!(
        row("tool calls per success"),
        [tools.clone(), tools],
        "{table}"
    );

    // A directory without trajectories is bad input, named.
    let out = run_in(&path, &["report", "out", "missing"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("missing"), "{}", stderr(&out));
}
