//! `uniagent run` on the swe-mini dataset in Docker, against an OpenAI-compatible test server:
//! a model that replays each task's gold patch through the editor tool and submits solves
//! every task; a model that submits at once solves none. The same run with `sandbox: {type:
//! k8s}` against the stand-in cluster running its pods as Docker containers of the task images
//! gives the same results. Skips (saying so) only when no Docker daemon answers; with one, the
//! task images must exist (scripts/setup/50-swe-mini-images.sh).

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
    replayer(dataset())
}

/// Replays the gold patch of the task whose issue the prompt holds when it is one of `gold`,
/// then submits (at once for any other task).
fn replayer(gold: Vec<Value>) -> common::Responder {
    let by_issue: HashMap<String, Vec<Value>> = gold
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
    let run_id = format!("test-swe-{}-{:x}", std::process::id(), fastrand::u32(..));
    let (summary, lines) = run_uniagent(&config(&server.base_url), &run_id).await;
    let docker = uniagent_sandboxes::docker::engine().await.unwrap();
    let left = uniagent_sandboxes::docker::list_managed(&docker, Some(&run_id))
        .await
        .unwrap();
    assert!(left.is_empty(), "containers left behind: {}", left.len());
    let requests = server.requests.lock().unwrap().clone();
    Some((summary, lines, requests))
}

/// Runs `uniagent run` on `config` as run `run_id`; the summary and the trajectories.
async fn run_uniagent(config: &str, run_id: &str) -> (Value, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "swe.yaml", config);
    let path = dir.path().to_path_buf();
    let id = run_id.to_owned();
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
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    let lines = std::fs::read_to_string(dir.path().join("out/trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (summary, lines)
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

/// Per task: whether it succeeded, the grader's verdict, how the rollout ended and its patch.
fn outcomes(lines: &[Value]) -> std::collections::BTreeMap<String, Value> {
    lines
        .iter()
        .map(|l| {
            (
                l["task_id"].as_str().unwrap().to_owned(),
                json!([
                    l["reward"]["success"],
                    l["reward"]["details"]["verdict"],
                    l["exit_reason"],
                    l["signal"]["patch"],
                ]),
            )
        })
        .collect()
}

#[test]
fn k8s_sandboxes_score_as_docker_sandboxes_do() {
    use uniagent_sandboxes::k8s::fake::{FakeCluster, FakeOptions, PodRunner, Resource, FAKE_KID};
    const NS: &str = "swe-mini";
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let body = async {
        if common::skip_without_docker() {
            return;
        }
        // Three tasks: two replay their gold patch, one submits nothing.
        let tasks: Vec<Value> = dataset().into_iter().take(3).collect();
        let dir = tempfile::tempdir().unwrap();
        let jsonl: String = tasks.iter().map(|t| format!("{t}\n")).collect();
        write(dir.path(), "tasks.jsonl", &jsonl);
        let server = ChatServer::start(replayer(tasks[..2].to_vec())).await;
        let docker_config = config_for(
            &server.base_url,
            dir.path().join("tasks.jsonl").to_str().unwrap(),
            "swe-bench",
            "uniagent-swe-mini:{instance_id}",
        );
        let run_id = format!(
            "test-swe-k8s-{}-{:x}",
            std::process::id(),
            fastrand::u32(..)
        );
        let (docker_summary, docker_lines) = run_uniagent(&docker_config, &run_id).await;

        let fake = FakeCluster::start(FakeOptions {
            pods: PodRunner::Docker,
            ..FakeOptions::default()
        })
        .await
        .unwrap();
        // The keys ConfigMap the backend's templates mount.
        fake.create_warm_pool(NS, "keys-only", 0).await.unwrap();
        let k8s_sandbox = [
            "    type: k8s".to_owned(),
            format!("    namespace: {NS}"),
            "    carrier_image: carrier:1".to_owned(),
            "    warm: 0".to_owned(),
            format!("    api_url: {}", fake.api_url()),
            format!(
                "    signing_key_file: {}",
                fake.signing_key_file().display()
            ),
            format!("    key_id: {FAKE_KID}"),
        ]
        .join("\n");
        let k8s_config = docker_config.replace("    type: docker", &k8s_sandbox);
        let (k8s_summary, k8s_lines) = run_uniagent(&k8s_config, &run_id).await;

        assert_eq!(docker_summary["rollouts"], 3, "{docker_summary}");
        let solved = docker_lines
            .iter()
            .filter(|l| l["reward"]["success"] == true)
            .count();
        assert_eq!(solved, 2, "{docker_lines:?}");
        assert_eq!(k8s_summary["rollouts"], 3, "{k8s_summary}");
        assert_eq!(
            k8s_summary["success_rate"], docker_summary["success_rate"],
            "{k8s_summary}"
        );
        // Task by task: the same verdicts, and byte for byte the same patches.
        assert_eq!(outcomes(&k8s_lines), outcomes(&docker_lines));
        // Each rollout and each grading ran in a pod's container of its own.
        assert!(
            fake.pod_containers_started() >= 5,
            "{}",
            fake.pod_containers_started()
        );
        // Every claim was deleted, and with it every pod's container.
        let (claims, _) = fake
            .store()
            .list(Resource::SandboxClaims, Some(NS), |_| true);
        assert!(claims.is_empty(), "{claims:?}");
        let docker = uniagent_sandboxes::docker::engine().await.unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left =
                uniagent_sandboxes::docker::list_managed(&docker, Some(&fake.container_run_id()))
                    .await
                    .unwrap();
            if left.is_empty() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pod containers left: {left:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    rt.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(600), body)
            .await
            .expect("both runs finish within 10 minutes")
    });
}
