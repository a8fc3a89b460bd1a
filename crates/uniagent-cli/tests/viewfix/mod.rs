//! Shared by the viewer tests: synthetic output directories and an in-process viewer server.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod cdp;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use uniagent_cli::view::Viewer;

/// The Qwen2.5 tokenizer fixture of uniagent-core (in this repository).
pub fn qwen_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../uniagent-core/tests/fixtures/tokenizers/qwen2.5")
}

/// Trajectory `i` of a synthetic run: task `task-{i % tasks}`, solved when `solved(i)`;
/// every 1000th mentions "needle" in its tool output, and
/// `i % 1000 == 11` has an 80-line tool output. Token ids are Qwen2.5 ids:
/// `<|im_start|>assistant\n` (template), "Hello world" sampled, `<|im_end|>` sampled,
/// "\n" template, then an observation.
pub fn trajectory(i: usize, tasks: usize, solved: bool) -> Value {
    let reasons = ["finished", "max_turns", "sandbox_error"];
    let task = format!("task-{}", i % tasks);
    let obs = if i % 1000 == 7 {
        format!("value {} needle", i * 7)
    } else if i % 1000 == 11 {
        // A long tool output (the chat folds it).
        (0..80).map(|k| format!("log line {k}\n")).collect()
    } else {
        format!("value {}", i * 7)
    };
    json!({
        "id": format!("{task}:{}", i / tasks), "task_id": task, "sample": i / tasks,
        "exit_reason": reasons[i % 3], "masked": false,
        "reward": {"score": if solved { 1.0 } else { 0.0 }, "success": solved,
                   "details": {"tests": {"test_a": "PASSED", "test_b": if solved { "PASSED" } else { "FAILED" }},
                               "expected": "42", "given": if solved { "42" } else { "41" }}},
        "counts": {"turns": 2, "tool_calls": 1, "tool_timeouts": 0, "format_errors": 0, "sampled_tokens": 3},
        "timings": {"sandbox_start": 0.1, "model": 0.5, "tools": 0.2, "reward": 0.05, "sandbox_stop": 0.05, "total": 1.0},
        "step": i / 1000,
        "phase": if i.is_multiple_of(2) { "rl" } else { "eval" },
        "messages": [
            {"role": "system", "content": "You are a file lookup agent."},
            {"role": "user", "content": format!("Find the value of key-{i}")},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "bash", "arguments": format!("{{\"command\":\"grep key-{i} data.txt\"}}")}}]},
            {"role": "tool", "tool_call_id": "c1", "content": obs},
        ],
        // <|im_start|>user\nhi<|im_end|>\n
        "prompt_ids": [151644, 872, 198, 6023, 151645, 198],
        // <|im_start|>assistant\n | Hello world<|im_end|> | \n | <|im_start|>user\nok
        "response_ids": [151644, 77091, 198, 9707, 1879, 151645, 198, 151644, 872, 198, 562],
        "response_mask": [0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0],
        "response_logprobs": [0.0, 0.0, 0.0, -0.25, -3.5, -0.01, 0.0, 0.0, 0.0, 0.0, 0.0],
        "weight_versions": [null, null, null, i / 1000, i / 1000, i / 1000, null, null, null, null, null],
    })
}

/// Writes `n` synthetic trajectories to `dir/trajectories.jsonl` (creating `dir`).
pub fn write_run(dir: &Path, n: usize, tasks: usize, solved: impl Fn(usize) -> bool) {
    std::fs::create_dir_all(dir).unwrap();
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(dir.join("trajectories.jsonl")).unwrap());
    for i in 0..n {
        writeln!(f, "{}", trajectory(i, tasks, solved(i))).unwrap();
    }
    f.flush().unwrap();
}

/// Appends raw text to `dir/name`.
pub fn append(dir: &Path, name: &str, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A viewer over `dirs` served on a free port; returns its base URL. The server task ends
/// with the test's runtime.
pub async fn serve(dirs: &[PathBuf]) -> String {
    let viewer = Viewer::new(dirs);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, viewer.router()).await });
    format!("http://{addr}")
}

/// GET `url` → (status, JSON body).
pub async fn get(url: impl AsRef<str>) -> (u16, Value) {
    let url = url.as_ref();
    let r = reqwest::get(url).await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let body =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"));
    (status, body)
}

/// The Qwen3 tokenizer fixture of uniagent-core (its template drops earlier reasoning).
pub fn qwen3_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../uniagent-core/tests/fixtures/tokenizers/qwen3")
}

/// The text the first turn of [`rerendered_trajectory`] samples after its think block: a
/// character the fixture's byte-level BPE splits across tokens.
pub const SPLIT_CHAR: &str = "𝔘";

/// A real rollout that is not append-only, recorded the way writers record it: over the Qwen3
/// fixture the policy samples an empty think block, then a new user query makes the template
/// drop it from the first turn. Returns the trajectory line (with `token_sources` and
/// `rerender_ids`) and the ids of the dropped block.
pub fn rerendered_trajectory() -> (Value, Vec<u32>) {
    use uniagent_core::codec::{messages_to_json, Codec};
    use uniagent_core::{LengthLimits, Message, RolloutCache};

    let codec = Codec::from_dir(qwen3_dir()).unwrap();
    let mut cache = codec
        .start(
            "rerender:0",
            vec![Message::user(format!("Say {SPLIT_CHAR}."))],
            vec![],
            serde_json::Map::new(),
            LengthLimits::default(),
        )
        .unwrap();
    let sample = |cache: &mut RolloutCache, text: &str| {
        let mut ids = codec.encode(text).unwrap();
        ids.push(codec.eos_token_id());
        let lps = vec![-0.5; ids.len()];
        codec.append_sampled(cache, &ids, &lps, Some(2)).unwrap();
    };
    sample(&mut cache, &format!("<think>\n\n</think>\n\n{SPLIT_CHAR}"));
    codec
        .append_messages(&mut cache, &[Message::user("Again, twice.")])
        .unwrap();
    sample(
        &mut cache,
        &format!("<think>\n\n</think>\n\n{SPLIT_CHAR}{SPLIT_CHAR}"),
    );
    assert!(!cache.append_only());
    let mut out = cache.to_agent_loop_output();
    out.rerender_ids = codec.rerender_ids(&cache).unwrap();
    let mut t = trajectory(0, 1, true);
    let obj = t.as_object_mut().unwrap();
    for (k, v) in serde_json::to_value(out).unwrap().as_object().unwrap() {
        obj.insert(k.clone(), v.clone());
    }
    obj.insert(
        "messages".into(),
        json!(messages_to_json(cache.messages()).unwrap()),
    );
    obj.insert("id".into(), json!("rerender:0"));
    obj.insert("task_id".into(), json!("rerender"));
    (t, codec.encode("<think>\n\n</think>\n\n").unwrap())
}
