//! `uniagent run` with `sandbox: {type: k8s, ...}` against the stand-in cluster
//! (`uniagent_sandboxes::k8s::fake`): the same environment and results as with the host backend, one
//! claim per rollout, every claim deleted at the end; a SIGKILLed run's claims deleted by
//! `uniagent k8s reap --run` and by the next run's start-up sweep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{assistant_turns, first_user_text, stderr, tool_call, write, ChatServer};
use serde_json::{json, Value};
use uniagent_sandboxes::k8s::fake::{FakeCluster, FakeOptions, Resource, FAKE_KID};

const NS: &str = "uniagent-agent-sandboxes";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_k8s_sandboxes_scores_as_with_the_host_backend() {
    let body = async {
        let fake = FakeCluster::start(FakeOptions::default()).await.unwrap();
        // The keys ConfigMap the backend's templates mount.
        fake.create_warm_pool(NS, "keys-only", 0).await.unwrap();
        // Creates the file the task names (only for the task that asks), then finishes.
        let responder: common::Responder = Arc::new(|body: &Value| {
            let prompt = first_user_text(body);
            if assistant_turns(body) == 0 && prompt.contains("please") {
                return tool_call(
                    "c0",
                    "execute_bash",
                    json!({"command": "cat seed.txt > out.txt"}),
                );
            }
            tool_call("c1", "finish", json!({"answer": "done"}))
        });
        let server = ChatServer::start(responder).await;
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "tasks.jsonl",
            "{\"id\": \"a\", \"metadata\": {\"prompt\": \"please write out.txt\"}}\n\
{\"id\": \"b\", \"metadata\": {\"prompt\": \"do nothing\"}}\n",
        );
        write(dir.path(), "run.yaml", &run_config(&fake, &server.base_url));
        let run_dir = dir.path().to_path_buf();
        let out = uniagent_in(&run_dir, &["run", "run.yaml", "--out", "out", "--quiet"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let summary: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["rollouts"], 2, "{summary}");
        let lines: Vec<Value> = std::fs::read_to_string(dir.path().join("out/trajectories.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for l in &lines {
            assert_eq!(l["reward"]["success"], l["task_id"] == "a", "{l}");
        }
        // Task b's sandbox did not see the file task a's wrote: one pod each.
        // Every claim was deleted when its rollout ended.
        let (claims, _) = fake
            .store()
            .list(Resource::SandboxClaims, Some(NS), |_| true);
        assert!(claims.is_empty(), "{claims:?}");
    };
    tokio::time::timeout(Duration::from_secs(120), body)
        .await
        .expect("the k8s run finishes within 120 s");
}

/// A `command` environment on k8s sandboxes of `fake`, with the model at `base_url`.
fn run_config(fake: &FakeCluster, base_url: &str) -> String {
    [
        "tasks: {path: tasks.jsonl}".to_owned(),
        "environment:".to_owned(),
        "  type: command".to_owned(),
        "  setup: [\"echo seeded-{id} > seed.txt\"]".to_owned(),
        "  reward: {command: \"grep -q seeded- out.txt\"}".to_owned(),
        "  sandbox:".to_owned(),
        "    type: k8s".to_owned(),
        format!("    namespace: {NS}"),
        "    image: \"python:3.12-slim-{id}\"".to_owned(),
        "    carrier_image: carrier:1".to_owned(),
        "    warm: 1".to_owned(),
        format!("    api_url: {}", fake.api_url()),
        format!(
            "    signing_key_file: {}",
            fake.signing_key_file().display()
        ),
        format!("    key_id: {FAKE_KID}"),
        format!("model: {{type: openai, http: {{endpoints: [\"{base_url}\"], model: m}}}}"),
        "loop: {max_turns: 3}".to_owned(),
    ]
    .join("\n")
}

/// Runs `uniagent args...` in `dir` off the async workers and returns its output.
async fn uniagent_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::run_in(&dir, &args)
    })
    .await
    .unwrap()
}

/// The number of claims in the namespace.
fn claims(fake: &FakeCluster) -> usize {
    fake.store()
        .list(Resource::SandboxClaims, Some(NS), |_| true)
        .0
        .len()
}

/// Polls `done` every 50 ms until it holds; panics naming `what` after 60 s.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `uniagent run` as run `run_id` on two tasks whose first command sleeps, waits until
/// both rollouts hold a sandbox and asked the model, and SIGKILLs it: its 2 claims stay behind.
async fn killed_run(fake: &FakeCluster, dir: &std::path::Path, run_id: &str) {
    let responder: common::Responder = Arc::new(|body: &Value| {
        if assistant_turns(body) == 0 {
            return tool_call("c0", "execute_bash", json!({"command": "sleep 30"}));
        }
        tool_call("c1", "finish", json!({"answer": "done"}))
    });
    let server = ChatServer::start(responder).await;
    write(
        dir,
        "tasks.jsonl",
        "{\"id\": \"a\", \"metadata\": {\"prompt\": \"wait\"}}\n\
{\"id\": \"b\", \"metadata\": {\"prompt\": \"wait\"}}\n",
    );
    write(dir, "run.yaml", &run_config(fake, &server.base_url));
    let mut child = common::uniagent()
        .current_dir(dir)
        .args(["run", "run.yaml", "--out", "out", "--quiet"])
        .env("UNIAGENT_RUN_ID", run_id)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let requests = server.requests.clone();
    until("both rollouts to ask the model", || {
        requests.lock().unwrap().len() >= 2
    })
    .await;
    until("2 claims", || claims(fake) == 2).await;
    child.kill().unwrap();
    child.wait().unwrap();
    // Nobody deletes them now: the leak the reaper exists for.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(claims(fake), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runs_claims_are_deleted_by_reap_run() {
    let body = async {
        let fake = FakeCluster::start(FakeOptions::default()).await.unwrap();
        fake.create_warm_pool(NS, "keys-only", 0).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        killed_run(&fake, dir.path(), "killed-run").await;
        let api = fake.api_url();
        let run_dir = dir.path().to_path_buf();
        let listed = uniagent_in(
            &run_dir,
            &["k8s", "list", "--config", "run.yaml", "--api-url", &api],
        )
        .await;
        assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
        let text = String::from_utf8_lossy(&listed.stdout).to_string();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.lines().all(|l| l.contains("\trun=killed-run\t")),
            "{text}"
        );
        // Another run's claims are not touched by `reap --run`.
        let out = uniagent_in(
            &run_dir,
            &[
                "k8s",
                "reap",
                "--run",
                "other-run",
                "--namespace",
                NS,
                "--api-url",
                &api,
            ],
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(out.stdout.is_empty());
        assert_eq!(claims(&fake), 2);
        // The sandboxes the claims hold (the warm pools keep sandboxes of their own).
        let held: Vec<String> = fake
            .store()
            .list(Resource::SandboxClaims, Some(NS), |_| true)
            .0
            .iter()
            .map(|c| c["status"]["sandbox"]["name"].as_str().unwrap().to_owned())
            .collect();
        let out = uniagent_in(
            &run_dir,
            &[
                "k8s",
                "reap",
                "--run",
                "killed-run",
                "--namespace",
                NS,
                "--api-url",
                &api,
            ],
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.lines()
                .all(|l| l.starts_with("deleted ua-killed-run-")),
            "{text}"
        );
        until("0 claims, and the claimed sandboxes and pods gone", || {
            let store = fake.store();
            let gone = |r: Resource| {
                store
                    .list(r, Some(NS), |o| {
                        held.iter().any(|h| o["metadata"]["name"] == h.as_str())
                    })
                    .0
                    .is_empty()
            };
            claims(&fake) == 0 && gone(Resource::Sandboxes) && gone(Resource::Pods)
        })
        .await;
    };
    tokio::time::timeout(Duration::from_secs(180), body)
        .await
        .expect("the test finishes within 180 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_run_sweeps_a_killed_runs_claims_at_start_up() {
    let body = async {
        let fake = FakeCluster::start(FakeOptions::default()).await.unwrap();
        fake.create_warm_pool(NS, "keys-only", 0).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        killed_run(&fake, dir.path(), "crashed-run").await;
        // The next run (another run id, a model that finishes at once) starts on this host.
        let responder: common::Responder =
            Arc::new(|_: &Value| tool_call("c1", "finish", json!({"answer": "done"})));
        let server = ChatServer::start(responder).await;
        write(dir.path(), "run.yaml", &run_config(&fake, &server.base_url));
        let run_dir = dir.path().to_path_buf();
        let out = uniagent_in(&run_dir, &["run", "run.yaml", "--out", "out2", "--quiet"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        until("the crashed run's claims to be swept", || {
            claims(&fake) == 0
        })
        .await;
    };
    tokio::time::timeout(Duration::from_secs(180), body)
        .await
        .expect("the test finishes within 180 s");
}
