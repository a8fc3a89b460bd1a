//! `uniagent run` on the swe-mini dataset in Docker, against an OpenAI-compatible test server:
//! a model that replays each task's gold patch through the editor tool and submits solves
//! every task; a model that submits at once solves none. Skips (saying so) only when no
//! Docker daemon answers; with one, the task images must exist
//! (scripts/setup/50-swe-mini-images.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{assistant_turns, first_user_text, repo_root, stderr, tool_call, write, ChatServer};
use serde_json::{json, Value};

/// One `str_replace` per hunk of a unified diff: the hunk's old side by its new side.
fn edits_of(patch: &str) -> Vec<Value> {
    let mut edits = Vec::new();
    let mut path = String::new();
    let (mut old, mut new, mut in_hunk) = (Vec::new(), Vec::new(), false);
    let flush =
        |path: &str, old: &mut Vec<String>, new: &mut Vec<String>, edits: &mut Vec<Value>| {
            if !old.is_empty() || !new.is_empty() {
                edits.push(
                    json!({"command": "str_replace", "path": format!("/testbed/{path}"),
                "old_str": old.join("\n"), "new_str": new.join("\n")}),
                );
            }
            old.clear();
            new.clear();
        };
    for line in patch.lines() {
        if let Some(p) = line.strip_prefix("+++ b/") {
            flush(&path, &mut old, &mut new, &mut edits);
            path = p.to_owned();
            in_hunk = false;
        } else if line.starts_with("diff --git") || line.starts_with("--- ") {
            flush(&path, &mut old, &mut new, &mut edits);
            in_hunk = false;
        } else if line.starts_with("@@") {
            flush(&path, &mut old, &mut new, &mut edits);
            in_hunk = true;
        } else if in_hunk {
            match line.chars().next() {
                Some(' ') => {
                    old.push(line[1..].to_owned());
                    new.push(line[1..].to_owned());
                }
                Some('-') => old.push(line[1..].to_owned()),
                Some('+') => new.push(line[1..].to_owned()),
                None => {
                    old.push(String::new());
                    new.push(String::new());
                }
                _ => {}
            }
        }
    }
    flush(&path, &mut old, &mut new, &mut edits);
    edits
}

fn dataset() -> Vec<Value> {
    std::fs::read_to_string(repo_root().join("datasets/swe-mini/tasks.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Replays the gold patch of the task whose issue the prompt holds, then submits.
fn gold_replayer() -> common::Responder {
    let by_issue: HashMap<String, Vec<Value>> = dataset()
        .into_iter()
        .map(|t| {
            (
                t["problem_statement"].as_str().unwrap().to_owned(),
                edits_of(t["patch"].as_str().unwrap()),
            )
        })
        .collect();
    Arc::new(move |body: &Value| {
        let prompt = first_user_text(body);
        let edits = by_issue
            .iter()
            .find(|(issue, _)| prompt.contains(issue.trim()))
            .map(|(_, e)| e.clone())
            .unwrap_or_default();
        let turn = assistant_turns(body);
        match edits.get(turn) {
            Some(edit) => tool_call(&format!("call_{turn}"), "str_replace_editor", edit.clone()),
            None => tool_call(&format!("call_{turn}"), "submit", json!({})),
        }
    })
}

fn config(url: &str) -> String {
    config_for(
        url,
        "datasets/swe-mini/tasks.jsonl",
        "swe-bench",
        "uniagent-swe-mini:{instance_id}",
    )
}

/// The run config for `dataset` (relative to the repository) in `layout`, with `image`.
fn config_for(url: &str, dataset: &str, layout: &str, image: &str) -> String {
    let dataset = repo_root().join(dataset);
    format!(
        "tasks:\n  path: {}\n  layout: {layout}\n\
environment:\n  type: swe\n  sandbox:\n    type: docker\n    image: \"{image}\"\n    memory_bytes: 268435456\n    cpus: 0.5\n  test_timeout: 120\n\
model:\n  type: openai\n  http: {{endpoints: [\"{url}\"], model: replay, timeout: 60}}\n\
loop:\n  max_turns: 8\n  tool_timeout: 60\n\
runner:\n  max_concurrent_rollouts: 3\n",
        dataset.display()
    )
}

async fn run_swe(responder: common::Responder) -> Option<(Value, Vec<Value>, Vec<Value>)> {
    run_swe_with(responder, config).await
}

async fn run_swe_with(
    responder: common::Responder,
    config: impl Fn(&str) -> String,
) -> Option<(Value, Vec<Value>, Vec<Value>)> {
    if common::skip_without_docker() {
        return None;
    }
    let server = ChatServer::start(responder).await;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "swe.yaml", &config(&server.base_url));
    let path = dir.path().to_path_buf();
    let run_id = format!("test-swe-{}-{:x}", std::process::id(), fastrand::u32(..));
    let id = run_id.clone();
    let out = tokio::task::spawn_blocking(move || {
        common::uniagent()
            .current_dir(&path)
            .env("UNIAGENT_RUN_ID", &id)
            .args(["run", "swe.yaml", "--out", "out", "--quiet"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let docker = uniagent_envs::docker::engine().await.unwrap();
    let left = uniagent_envs::docker::list_managed(&docker, Some(&run_id))
        .await
        .unwrap();
    assert!(left.is_empty(), "containers left behind: {}", left.len());
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    let lines = std::fs::read_to_string(dir.path().join("out/trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let requests = server.requests.lock().unwrap().clone();
    Some((summary, lines, requests))
}

#[test]
fn gold_patches_replayed_through_the_editor_solve_every_task() {
    let edits = edits_of(dataset()[0]["patch"].as_str().unwrap());
    assert!(!edits.is_empty());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let Some((summary, lines, requests)) = rt.block_on(run_swe(gold_replayer())) else {
        return;
    };
    assert_eq!(summary["rollouts"], 6, "{summary}");
    assert_eq!(summary["success_rate"], 1.0, "{summary} {lines:?}");
    for l in &lines {
        assert_eq!(l["exit_reason"], "submitted", "{l}");
        let patch = l["signal"]["patch"].as_str().unwrap_or_default();
        assert!(patch.contains("diff --git"), "{l}");
        // Graded in a fresh sandbox (the default), which reports the harness's verdict.
        assert_eq!(l["reward"]["details"]["verdict"], "resolved", "{l}");
    }
    // Every request the loop sent is a valid chat-completions request with the tools.
    for r in &requests {
        common::check_request(r).unwrap();
        let names: Vec<&str> = r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["execute_bash", "str_replace_editor", "submit"]);
    }
}

#[test]
fn submitting_nothing_solves_no_task() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let submit_at_once: common::Responder = Arc::new(|body: &Value| {
        tool_call(
            &format!("call_{}", assistant_turns(body)),
            "submit",
            json!({}),
        )
    });
    let Some((summary, lines, _)) = rt.block_on(run_swe(submit_at_once)) else {
        return;
    };
    assert_eq!(summary["rollouts"], 6, "{summary}");
    assert_eq!(summary["success_rate"], 0.0, "{summary}");
    for l in &lines {
        assert_eq!(l["exit_reason"], "submitted", "{l}");
        assert_eq!(l["reward"]["success"], false, "{l}");
    }
}

#[test]
fn r2e_gym_rows_are_scored_by_their_hidden_tests() {
    // The same tasks in R2E-Gym's layout (scripts/setup/50-swe-mini-images.sh): the gold
    // patch resolves by the images' hidden tests and `expected_output_json`; nothing, not.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let r2e = |url: &str| {
        config_for(
            url,
            "datasets/swe-mini-r2e/tasks.jsonl",
            "r2e-gym",
            "{image}",
        )
    };
    let Some((summary, lines, _)) = rt.block_on(run_swe_with(gold_replayer(), r2e)) else {
        return;
    };
    assert_eq!(summary["rollouts"], 6, "{summary}");
    assert_eq!(summary["success_rate"], 1.0, "{summary} {lines:?}");
    for l in &lines {
        let r2e = &l["reward"]["details"]["r2e"];
        assert_eq!(r2e["comparison"]["matches"], true, "{l}");
    }
    let submit_at_once: common::Responder = Arc::new(|body: &Value| {
        tool_call(
            &format!("call_{}", assistant_turns(body)),
            "submit",
            json!({}),
        )
    });
    let Some((summary, _, _)) = rt.block_on(run_swe_with(submit_at_once, r2e)) else {
        return;
    };
    assert_eq!(summary["success_rate"], 0.0, "{summary}");
    // `grading: in_sandbox`: R2E-Gym's reward in the agent's own container agrees on gold.
    let in_sandbox = |url: &str| {
        r2e(url).replace(
            "  test_timeout: 120\n",
            "  test_timeout: 120\n  grading: in_sandbox\n",
        )
    };
    let Some((summary, lines, _)) = rt.block_on(run_swe_with(gold_replayer(), in_sandbox)) else {
        return;
    };
    assert_eq!(summary["success_rate"], 1.0, "{summary} {lines:?}");
    for l in &lines {
        assert_eq!(l["reward"]["details"]["comparison"]["matches"], true, "{l}");
    }
}
