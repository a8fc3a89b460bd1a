//! A real harness from PyPI, unmodified, end to end: mini-swe-agent (its own agent, litellm
//! client and Docker environment, with its shipped SWE-bench config) solves a swe-mini task in
//! a Docker sandbox through a gateway session, and the session's chain is checked token for
//! token against Hugging Face `transformers`' render of the conversation the harness sent last.
//!
//! The policy is scripted (a token-level generator answering fixed turns): the model is not
//! what this test tests, and a fixed script makes the harness's path certain. The script's
//! first turn is a tool call with broken JSON: the gateway answers it as text, mini-swe-agent
//! drops that turn and sends a format-error message instead, and the gateway forks a chain.
//!
//! Needs `.venv-mini-swe` (`scripts/setup/61-mini-swe-agent.sh`, found through
//! `UNIAGENT_MINI_SWE_VENV`), `.venv-codec` (`UNIAGENT_CODEC_VENV`) and the swe-mini images
//! (`scripts/setup/50-swe-mini-images.sh`). Skips with a printed reason when
//! `UNIAGENT_MINI_SWE_VENV` is unset; fails when it is set and a part is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::sdk::venv_python;
use serde_json::{json, Value};
use uniagent_core::testing::output_with_stdin;
use uniagent_gateway::GatewayConfig;

const TASK: &str = "swe-mini__csvline-1";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn task() -> Value {
    let tasks = std::fs::read_to_string(repo("../../datasets/swe-mini/tasks.jsonl")).unwrap();
    tasks
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|t| t["instance_id"] == TASK)
        .unwrap()
}

/// The assistant text Qwen2.5's template renders for `thought` plus one `bash` call: what a
/// model trained on that template samples. Arguments are JSON as the template's `tojson`
/// writes them (Python's `json.dumps`: `", "` and `": "` separators, non-ASCII kept).
fn bash_turn(thought: &str, command: &str) -> String {
    let command = serde_json::to_string(command).unwrap();
    format!(
        "{thought}\n<tool_call>\n{{\"name\": \"bash\", \"arguments\": {{\"command\": {command}}}}}\n</tool_call>"
    )
}

/// `transformers`' `apply_chat_template` render of `conversation`, tokenized.
fn reference_ids(python: &Path, model_dir: &Path, conversation: Value) -> Vec<u64> {
    let request =
        json!({"model_dir": model_dir, "mode": "render", "conversations": [conversation]});
    let out = output_with_stdin(
        Command::new(python).arg(repo(
            "../uniagent-core/tests/fixtures/hf_apply_chat_template.py",
        )),
        request.to_string().as_bytes(),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "reference render failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rendered[0]["error"].is_null(), "{rendered}");
    rendered[0]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn image_exists(image: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mini_swe_agent_solves_a_task_through_the_gateway_with_exact_tokens() {
    let Some(harness) = venv_python(
        "UNIAGENT_MINI_SWE_VENV",
        "scripts/setup/61-mini-swe-agent.sh",
    ) else {
        return;
    };
    let reference = venv_python("UNIAGENT_CODEC_VENV", "scripts/setup/10-codec.sh")
        .expect("the token check needs UNIAGENT_CODEC_VENV next to UNIAGENT_MINI_SWE_VENV");
    let image = format!("uniagent-swe-mini:{TASK}");
    assert!(
        image_exists(&image),
        "Docker image {image} is missing: run scripts/setup/50-swe-mini-images.sh"
    );
    let task = task();
    let patch = task["patch"].as_str().unwrap();

    let served = common::serve("qwen2.5", GatewayConfig::default()).await;
    // Broken JSON (the arguments' object is not closed): answered as text, flagged.
    let broken = "THOUGHT: Let me look around first.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}\n</tool_call>";
    let turns = [
        bash_turn(
            "THOUGHT: The issue is about split(); let me read it.",
            "nl -ba csvline/core.py | sed -n '1,40p'",
        ),
        bash_turn(
            "THOUGHT: A doubled quote inside a quoted field must become one quote. I apply the fix.",
            &format!("git apply <<'EOF'\n{patch}EOF"),
        ),
        bash_turn(
            "THOUGHT: Now I check the issue's example and run the existing tests.",
            r#"python3 -c 'from csvline import split; print(split("\"say \"\"hi\"\"\",x"))' && python3 /opt/swe-mini/runtests.py tests"#,
        ),
        bash_turn(
            "THOUGHT: The tests pass. I write the patch.",
            "git diff -- csvline/core.py > patch.txt",
        ),
        bash_turn(
            "THOUGHT: Done.",
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt",
        ),
    ];
    served.script.push_ids(served.turn(broken));
    let sampled: Vec<Vec<u32>> = turns.iter().map(|t| served.turn(t)).collect();
    for ids in &sampled {
        served.script.push_ids(ids.clone());
    }

    let out_dir = tempfile::tempdir().unwrap();
    let task_file = out_dir.path().join("task.json");
    std::fs::write(&task_file, task.to_string()).unwrap();
    let (base, out_path) = (served.base.clone(), out_dir.path().to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(harness)
            .arg(repo("tests/clients/mini_swe.py"))
            .args([&base, "msa", &image])
            .arg(&task_file)
            .arg(&out_path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "mini_swe.py failed:\n{log}");
    let result = std::fs::read(out_dir.path().join("result.json"))
        .unwrap_or_else(|e| panic!("mini_swe.py wrote no result ({e}):\n{log}"));
    let run: Value = serde_json::from_slice(&result).unwrap();

    // The harness solved the task: the fix applied, the issue's tests pass, the submission is
    // the gold patch, and its container is gone.
    assert_eq!(run["exit_status"], "Submitted", "{run}");
    assert_eq!(run["submission"].as_str().unwrap(), patch);
    let messages = run["messages"].as_array().unwrap();
    let observations: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(observations.len(), 4, "{run}");
    assert!(
        observations[2].contains(r#"['say "hi"', 'x']"#)
            && observations[2].contains("PASSED tests/test_core.py::test_quoted_separator")
            && !observations[2].contains("FAILED"),
        "{}",
        observations[2]
    );
    let container = run["container"].as_str().unwrap();
    let left = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("id={container}")])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "container {container} was left");
    // The broken turn never reached the harness's history: a format error replaced it.
    let users: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users.len(), 2, "{users:?}");
    assert!(users[1].contains("tool call"), "{}", users[1]);

    let (status, _) = served
        .post(
            "/sessions/msa/reward",
            &json!({"score": 1.0, "success": true}),
        )
        .await;
    assert_eq!(status, 200);
    let chains = served.end("msa").await;
    // Dropping the broken turn rewrote the history. Rolled back, the first chain would have to
    // take a second user message in a row, which the incremental append cannot: the gateway
    // starts a second chain from the template's full render and keeps the first, the broken
    // turn and its format error included (nothing sampled is lost).
    assert_eq!(chains.len(), 2, "{chains:?}");
    let broken_ids: Vec<u64> = served.turn(broken).into_iter().map(u64::from).collect();
    assert_eq!(common::sampled(&chains[0]), broken_ids);
    assert_eq!(chains[0]["counts"]["format_errors"], 1, "{}", chains[0]);
    let chain = &chains[1];
    assert_eq!(
        chain["extra_fields"]["gateway"]["origin"], "not_extensible",
        "{chain}"
    );
    assert_eq!(chain["counts"]["format_errors"], 0, "{chain}");

    // Every later sampled turn is in the second chain as sampled, in order.
    let expected: Vec<u64> = sampled.iter().flatten().map(|&id| u64::from(id)).collect();
    assert_eq!(common::sampled(chain), expected);
    assert_eq!(chain["reward_score"], 1.0);

    // The whole chain is the reference tokenizer's render of the final conversation (tool-call
    // arguments as objects, as the template expects), less the newline after the last turn.
    let mut conversation = messages.clone();
    for m in &mut conversation {
        for call in m["tool_calls"].as_array_mut().into_iter().flatten() {
            let args = call["function"]["arguments"].as_str().unwrap().to_owned();
            call["function"]["arguments"] = serde_json::from_str(&args).unwrap();
        }
    }
    let full = reference_ids(
        &reference,
        &common::fixture("qwen2.5"),
        json!({"messages": conversation, "tools": run["tools"], "add_generation_prompt": false}),
    );
    let ids = |key: &str| -> Vec<u64> {
        chain[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let mut tokens = ids("prompt_ids");
    tokens.extend(ids("response_ids"));
    let newline = served.codec.encode("\n").unwrap();
    assert_eq!(full.last().map(|&id| id as u32), newline.last().copied());
    assert_eq!(
        tokens,
        full[..full.len() - 1],
        "chain differs from the reference render"
    );
}
