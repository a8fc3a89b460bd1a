//! The `search-qa` and `command` environments through `uniagent run`, with a model served
//! over the chat-completions wire format.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{assistant_turns, first_user_text, stderr, tool_call, write, ChatServer};
use serde_json::{json, Value};

async fn run(dir: std::path::PathBuf) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        common::run_in(&dir, &["run", "run.yaml", "--out", "out", "--quiet"])
    })
    .await
    .unwrap()
}

fn results(dir: &std::path::Path) -> (Value, Vec<Value>) {
    let summary =
        serde_json::from_slice(&std::fs::read(dir.join("out/summary.json")).unwrap()).unwrap();
    let lines = std::fs::read_to_string(dir.join("out/trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (summary, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_qa_searches_the_corpus_and_scores_exact_match() {
    // Searches the question, then answers with the title of the top hit.
    let responder: common::Responder = Arc::new(|body: &Value| {
        if assistant_turns(body) == 0 {
            let q = first_user_text(body);
            let q = q.rsplit("Question: ").next().unwrap_or_default().to_owned();
            return tool_call("c0", "search", json!({"query_list": [q]}));
        }
        let out = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .unwrap();
        let title = out["content"]
            .as_str()
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Title: "))
            .unwrap_or("")
            .to_owned();
        tool_call("c1", "finish", json!({"answer": title}))
    });
    let server = ChatServer::start(responder).await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "corpus.jsonl",
        "{\"id\": \"1\", \"title\": \"Paris\", \"text\": \"Paris is the capital of France.\"}\n\
{\"id\": \"2\", \"title\": \"Berlin\", \"text\": \"Berlin is the capital of Germany.\"}\n\
{\"id\": \"3\", \"title\": \"Ottawa\", \"text\": \"Ottawa is the capital of Canada.\"}\n",
    );
    write(
        dir.path(),
        "qa.jsonl",
        "{\"id\": \"q1\", \"question\": \"capital of France\", \"golden_answers\": [\"Paris\"]}\n\
{\"id\": \"q2\", \"question\": \"capital of Germany\", \"golden_answers\": \"berlin\"}\n\
{\"id\": \"q3\", \"question\": \"capital of Canada\", \"golden_answers\": [\"Toronto\"]}\n",
    );
    write(
        dir.path(),
        "run.yaml",
        &format!(
            "tasks: {{path: qa.jsonl, layout: search-qa}}\nenvironment: {{type: search-qa, corpus: corpus.jsonl, metric: exact_match}}\n\
model: {{type: openai, http: {{endpoints: [\"{}\"], model: m}}}}\nloop: {{max_turns: 3}}\n",
            server.base_url
        ),
    );
    let out = run(dir.path().to_path_buf()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (summary, lines) = results(dir.path());
    assert_eq!(summary["rollouts"], 3);
    // q3's gold answer is wrong on purpose: exact match must say so.
    let solved: Vec<&str> = lines
        .iter()
        .filter(|l| l["reward"]["success"] == true)
        .map(|l| l["task_id"].as_str().unwrap())
        .collect();
    let mut solved = solved;
    solved.sort();
    assert_eq!(solved, ["q1", "q2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_reward_runs_in_the_sandbox_after_setup() {
    // Creates the file the task names (only for tasks with `do: true`), then finishes.
    let responder: common::Responder = Arc::new(|body: &Value| {
        let prompt = first_user_text(body);
        if assistant_turns(body) == 0 && prompt.contains("please") {
            let file = prompt.split_whitespace().last().unwrap_or("x").to_owned();
            return tool_call(
                "c0",
                "execute_bash",
                json!({"command": format!("cat seed.txt > {file}")}),
            );
        }
        tool_call("c1", "finish", json!({"answer": "done"}))
    });
    let server = ChatServer::start(responder).await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "tasks.jsonl",
        "{\"id\": \"a\", \"metadata\": {\"prompt\": \"please write out.txt\", \"file\": \"out.txt\"}}\n\
{\"id\": \"b\", \"metadata\": {\"prompt\": \"do nothing with out.txt\", \"file\": \"out.txt\"}}\n",
    );
    write(
        dir.path(),
        "run.yaml",
        &format!(
            "tasks: {{path: tasks.jsonl}}\nenvironment:\n  type: command\n  setup: [\"echo seeded-{{id}} > seed.txt\"]\n  reward: {{command: \"grep -q seeded- out.txt\"}}\n\
model: {{type: openai, http: {{endpoints: [\"{}\"], model: m}}}}\nloop: {{max_turns: 3}}\n",
            server.base_url
        ),
    );
    let out = run(dir.path().to_path_buf()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (summary, lines) = results(dir.path());
    assert_eq!(summary["rollouts"], 2);
    for l in &lines {
        let want = l["task_id"] == "a";
        assert_eq!(l["reward"]["success"], want, "{l}");
    }
}
