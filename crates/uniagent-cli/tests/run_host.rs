//! `uniagent run` end to end on host sandboxes: the file-lookup environment with a model
//! served over the chat-completions wire format, which reads the file and answers with what
//! it read. Checks the output directory, resume (finished pairs are not run again, partly
//! finished tasks get exactly their missing samples) and Ctrl-C (exit 1, finished rollouts
//! kept, no sandbox process left).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::{file_reader, run_in, stderr, write, ChatServer};
use serde_json::Value;

fn config(url: &str, mark: &str, count: usize, samples: u32) -> String {
    format!(
        "tasks:\n  generate: {{count: {count}, seed: 3}}\n\
environment:\n  type: file-lookup\n  sandbox:\n    type: host\n    env: {{UNIAGENT_TEST_MARK: \"{mark}\"}}\n\
model:\n  type: openai\n  http: {{endpoints: [\"{url}\"], model: replay, timeout: 30}}\n\
loop:\n  max_turns: 4\n\
runner:\n  samples_per_task: {samples}\n  max_concurrent_rollouts: 4\n"
    )
}

/// The records of `trajectories.jsonl`, each checked against the format's JSON Schema.
fn lines(dir: &Path) -> Vec<Value> {
    let records: Vec<Value> = std::fs::read_to_string(dir.join("trajectories.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &records {
        let violations = uniagent_core::testing::trajectory_record_violations(r);
        assert!(violations.is_empty(), "{violations:?} in {r}");
    }
    records
}

fn pairs(lines: &[Value]) -> BTreeSet<(String, u64)> {
    lines
        .iter()
        .map(|l| {
            (
                l["task_id"].as_str().unwrap().to_owned(),
                l["sample"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn no_sandbox_left(mark: &str) {
    let left = uniagent_sandboxes::host::marked_processes(&format!("UNIAGENT_TEST_MARK={mark}"));
    assert!(left.is_empty(), "sandbox processes left: {left:?}");
}

async fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_in(&dir, &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_resumes_and_keeps_tokens_out_for_api_models() {
    let server = ChatServer::start(file_reader(Duration::ZERO)).await;
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("run-{}", fastrand::u64(..));
    write(
        dir.path(),
        "run.yaml",
        &config(&server.base_url, &mark, 3, 2),
    );

    let out = run(dir.path(), &["run", "run.yaml", "--out", "out", "--quiet"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let outdir = dir.path().join("out");
    let first = lines(&outdir);
    assert_eq!(first.len(), 6);
    assert_eq!(pairs(&first).len(), 6);
    for l in &first {
        assert_eq!(l["exit_reason"], "finished", "{l}");
        assert_eq!(l["reward"]["success"], true, "{l}");
        assert_eq!(
            l["id"],
            format!("{}:{}", l["task_id"].as_str().unwrap(), l["sample"])
        );
        assert!(l["messages"].as_array().unwrap().len() >= 5, "{l}");
        // An API model gives no tokens: the token fields are absent, not empty or zeros.
        assert!(
            l.get("response_ids").is_none() && l.get("response_logprobs").is_none(),
            "{l}"
        );
    }
    let summary: Value =
        serde_json::from_slice(&std::fs::read(outdir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["tasks"], 3);
    assert_eq!(summary["rollouts"], 6);
    assert_eq!(summary["success_rate"], 1.0);
    assert_eq!(summary["mean_reward"], 1.0);
    assert_eq!(summary["exit_reasons"]["finished"], 6);
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stdout["rollouts"], 6);
    let effective = std::fs::read_to_string(outdir.join("config.yaml")).unwrap();
    assert!(effective.contains("file-lookup"), "{effective}");

    // Rerun: nothing to do, no request sent.
    let before = server.requests.lock().unwrap().len();
    let out = run(dir.path(), &["run", "run.yaml", "--out", "out", "--quiet"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lines(&outdir).len(), 6);
    assert_eq!(server.requests.lock().unwrap().len(), before);

    // More tasks, and one task with a sample lost (as after a crash): exactly the missing
    // pairs run, the partial task gets its missing sample index back.
    let kept: Vec<String> = std::fs::read_to_string(outdir.join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            !(v["task_id"] == "lookup-1" && v["sample"] == 1)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    // A torn last line, as a crash mid-write leaves it.
    std::fs::write(
        outdir.join("trajectories.jsonl"),
        format!("{}{{\"id\": \"lookup-", kept.concat()),
    )
    .unwrap();
    let out = run(
        dir.path(),
        &[
            "run",
            "run.yaml",
            "--out",
            "out",
            "--quiet",
            "--set",
            "tasks.generate.count=4",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let all = lines(&outdir);
    assert_eq!(all.len(), 8, "{all:?}");
    let expected: BTreeSet<(String, u64)> = (0..4)
        .flat_map(|t| (0..2).map(move |s| (format!("lookup-{t}"), s)))
        .collect();
    assert_eq!(pairs(&all), expected);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(outdir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["rollouts"], 8);
    assert_eq!(summary["tasks"], 4);
    no_sandbox_left(&mark);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_keeps_finished_rollouts_and_leaks_no_sandbox() {
    let server = ChatServer::start(file_reader(Duration::from_millis(400))).await;
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("sigint-{}", fastrand::u64(..));
    write(
        dir.path(),
        "run.yaml",
        &config(&server.base_url, &mark, 12, 1),
    );
    let outdir = dir.path().join("out");
    let child = common::uniagent()
        .current_dir(dir.path())
        .args([
            "run",
            "run.yaml",
            "--out",
            "out",
            "--quiet",
            "--concurrency",
            "2",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while lines(&outdir).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no rollout finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    no_sandbox_left(&mark);
    let kept = lines(&outdir);
    assert!(kept.len() >= 2 && kept.len() < 12, "{}", kept.len());
    assert!(
        kept.iter().all(|l| l["exit_reason"] == "finished"),
        "a cancelled rollout was kept"
    );

    // Resume completes the run without repeating a finished pair.
    let out = run(dir.path(), &["run", "run.yaml", "--out", "out", "--quiet"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let all = lines(&outdir);
    assert_eq!(all.len(), 12);
    assert_eq!(pairs(&all).len(), 12);
    no_sandbox_left(&mark);
}
