//! `uniagent run` with `sandbox: {type: k8s, ...}` against the stand-in cluster
//! (`uniagent_envs::k8s::fake`): the same environment and results as with the host backend, one
//! claim per rollout, every claim deleted at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{assistant_turns, first_user_text, stderr, tool_call, write, ChatServer};
use serde_json::{json, Value};
use uniagent_envs::k8s::fake::{FakeCluster, FakeOptions, Resource, FAKE_KID};

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
        write(
            dir.path(),
            "run.yaml",
            &[
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
                format!(
                    "model: {{type: openai, http: {{endpoints: [\"{}\"], model: m}}}}",
                    server.base_url
                ),
                "loop: {max_turns: 3}".to_owned(),
            ]
            .join("\n"),
        );
        let run_dir = dir.path().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            common::run_in(&run_dir, &["run", "run.yaml", "--out", "out", "--quiet"])
        })
        .await
        .unwrap();
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
