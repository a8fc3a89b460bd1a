//! `uniagent run` with `output.cassettes: true` over a token-level model (a scripted vLLM
//! `/v1/completions` server speaking token ids through the Qwen2.5 codec fixture), then
//! `uniagent replay`: identical with recorded tools and with live host tools on file-lookup;
//! a tampered sampled token and a tampered observation diverge where they happen; `date +%N`
//! in a `command` environment diverges live. Gateway cassettes (`uniagent gateway --out DIR
//! --cassettes`) replay too, with the model server gone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::routing::post;
use axum::{Json, Router};
use common::{stderr, write};
use serde_json::{json, Value};
use uniagent_core::codec::Codec;

fn tokenizer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../uniagent-core/tests/fixtures/tokenizers/qwen2.5")
}

/// What the policy writes at `turn`, given the decoded context.
type Script = Arc<dyn Fn(usize, &str) -> String + Send + Sync>;

/// A vLLM completions server: decodes the prompt ids, asks `script` for the turn's text and
/// answers its token ids (plus the stop id) with made-up logprobs.
async fn vllm(script: Script) -> (String, tokio::task::JoinHandle<()>) {
    let codec = Arc::new(Codec::from_dir(tokenizer_dir()).unwrap());
    let app = Router::new().route(
        "/v1/completions",
        post(move |Json(body): Json<Value>| {
            let codec = Arc::clone(&codec);
            let script = Arc::clone(&script);
            async move {
                let prompt: Vec<u32> = serde_json::from_value(body["prompt"].clone()).unwrap();
                let text = codec.decode(&prompt, false).unwrap();
                let turn = text.matches("<|im_start|>assistant").count() - 1;
                let mut ids = codec.encode(&script(turn, &text)).unwrap();
                ids.push(body["stop_token_ids"][0].as_u64().unwrap() as u32);
                let lps: Vec<f64> = (0..ids.len()).map(|i| -0.25 * (i % 7) as f64).collect();
                Json(json!({"choices": [{"index": 0, "text": "", "finish_reason": "stop",
                    "logprobs": {"tokens": ids.iter().map(|i| format!("token_id:{i}")).collect::<Vec<_>>(),
                                 "token_logprobs": lps}}]}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, handle)
}

/// Reads the asked file, then answers with the digits of the last observation.
fn file_reader() -> Script {
    Arc::new(common::file_reader_text)
}

fn model(url: &str) -> String {
    format!(
        "model:\n  type: vllm\n  tokenizer: {}\n  http: {{endpoints: [\"{url}\"], model: m, timeout: 30}}\n",
        tokenizer_dir().display()
    )
}

async fn uniagent(dir: &Path, args: &[&str]) -> std::process::Output {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::run_in(&dir, &args)
    })
    .await
    .unwrap()
}

fn summary(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)))
}

/// The lines of a cassettes file the binary wrote, each checked against the format's JSON
/// Schema (loop cassettes of `run`, gateway cassettes of `gateway`).
fn cassettes(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let line = serde_json::from_str(l).unwrap();
            let violations = uniagent_core::testing::cassette_violations(&line);
            assert!(violations.is_empty(), "{violations:#?}");
            line
        })
        .collect()
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_lookup_cassettes_replay_identically_and_tampering_is_located() {
    let (url, _server) = vllm(file_reader()).await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "run.yaml",
        &format!(
            "tasks:\n  generate: {{count: 2, seed: 5}}\nenvironment:\n  type: file-lookup\n  sandbox: {{type: host}}\n{}\
loop: {{max_turns: 4}}\nrunner: {{samples_per_task: 2, max_concurrent_rollouts: 4}}\noutput: {{cassettes: true}}\n",
            model(&url)
        ),
    );
    let out = uniagent(dir.path(), &["run", "run.yaml", "--out", "out", "--quiet"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let file = dir.path().join("out/cassettes.jsonl");
    let lines = cassettes(&file);
    assert_eq!(lines.len(), 4);
    let trajectories: Vec<Value> =
        std::fs::read_to_string(dir.path().join("out/trajectories.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    for t in &trajectories {
        assert_eq!(t["reward"]["success"], true, "{t}");
        let c = lines.iter().find(|c| c["id"] == t["id"]).unwrap();
        assert_eq!(c["cassette"], 1);
        assert_eq!(c["trajectory"]["response_ids"], t["response_ids"]);
        assert_eq!(c["trajectory"]["response_logprobs"], t["response_logprobs"]);
    }

    for tools in ["recorded", "live"] {
        let out = uniagent(
            dir.path(),
            &["replay", "out/cassettes.jsonl", "--tools", tools],
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{tools}: {}", stderr(&out));
        let s = summary(&out);
        assert_eq!(
            (s["replayed"].as_u64(), s["identical"].as_u64()),
            (Some(4), Some(4)),
            "{s}"
        );
        assert_eq!(s["tools"], tools);
    }

    // A sampled token of the first turn changed (in its text, so the call still parses): the
    // second prompt differs right there.
    let mut tampered = lines.clone();
    let c = &mut tampered[1];
    let prompt_len = c["trajectory"]["prompt_ids"].as_array().unwrap().len();
    let id = c["steps"][0]["output"]["token_ids"][0].as_u64().unwrap();
    c["steps"][0]["output"]["token_ids"][0] = json!(id + 1);
    // An observation changed in another: the second prompt differs inside it.
    let c = &mut tampered[2];
    assert_eq!(c["steps"][1]["name"], "execute_bash");
    c["steps"][1]["outcome"]["output"]["content"] = json!("999");
    write_lines(&dir.path().join("tampered.jsonl"), &tampered);
    let out = uniagent(dir.path(), &["replay", "tampered.jsonl"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("2 of 4 replays diverged"),
        "{}",
        stderr(&out)
    );
    let s = summary(&out);
    assert_eq!(s["identical"], 2);
    let diverged = s["diverged"].as_array().unwrap();
    assert_eq!(diverged[0]["id"], tampered[1]["id"]);
    assert_eq!(
        diverged[0]["divergence"],
        json!({"kind": "prompt", "turn": 1, "position": prompt_len, "expected": id, "got": id + 1})
    );
    assert_eq!(diverged[1]["id"], tampered[2]["id"]);
    assert_eq!(diverged[1]["divergence"]["kind"], "prompt");
    assert_eq!(diverged[1]["divergence"]["turn"], 1);

    // Bad input exits 2 naming the line.
    write(dir.path(), "bad.jsonl", "{\"cassette\": 7}\n");
    let out = uniagent(dir.path(), &["replay", "bad.jsonl"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("bad.jsonl:1") && stderr(&out).contains("version 7"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_deterministic_command_diverges_live_only() {
    let script: Script = Arc::new(|turn, _| match turn {
        0 => common::hermes_call("execute_bash", json!({"command": "date +%N"})),
        _ => common::hermes_call("finish", json!({"answer": "done"})),
    });
    let (url, _server) = vllm(script).await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "tasks.jsonl",
        "{\"id\": \"clock\", \"metadata\": {\"prompt\": \"Tell the time.\"}}\n",
    );
    write(
        dir.path(),
        "run.yaml",
        &format!(
            "tasks: {{path: tasks.jsonl}}\nenvironment:\n  type: command\n  sandbox: {{type: host}}\n  reward: {{command: \"true\"}}\n{}\
loop: {{max_turns: 3}}\noutput: {{cassettes: true}}\n",
            model(&url)
        ),
    );
    let out = uniagent(dir.path(), &["run", "run.yaml", "--out", "out", "--quiet"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = uniagent(dir.path(), &["replay", "out/cassettes.jsonl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = uniagent(
        dir.path(),
        &["replay", "out/cassettes.jsonl", "--tools", "live"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let d = &summary(&out)["diverged"][0]["divergence"];
    assert_eq!(d["kind"], "observation", "{d}");
    assert_eq!(
        (d["turn"].as_u64(), d["tool"].as_str()),
        (Some(0), Some("execute_bash"))
    );
    assert_ne!(d["expected"], d["got"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassettes_need_a_token_level_model_and_replay_needs_a_file() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "run.yaml",
        "tasks:\n  generate: {count: 1, seed: 5}\nenvironment:\n  type: file-lookup\n  sandbox: {type: host}\n\
model: {type: openai, http: {endpoints: [\"http://127.0.0.1:9/v1\"], model: m}}\noutput: {cassettes: true}\n",
    );
    let out = uniagent(dir.path(), &["run", "run.yaml", "--out", "out", "--quiet"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("run.yaml:")
            && stderr(&out).contains("output.cassettes")
            && stderr(&out).contains("token-level"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("out/cassettes.jsonl").exists());
    let out = uniagent(dir.path(), &["replay", "missing.jsonl"]).await;
    assert_eq!(out.status.code(), Some(2));
    write(dir.path(), "empty.jsonl", "\n");
    let out = uniagent(dir.path(), &["replay", "empty.jsonl", "--tools", "live"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no cassettes"), "{}", stderr(&out));
}

/// `uniagent gateway --out DIR --cassettes` over a scripted vLLM server: an OpenAI session
/// (plain, then streamed) ended by the client and an Anthropic one left open and ended by
/// SIGTERM are recorded as two gateway cassettes, which `uniagent replay` rebuilds identically
/// with the server gone; `--tools live` is refused (exit 2), a tampered sampled id exits 1 at
/// that request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_cassettes_replay_without_the_model() {
    use std::io::{BufRead, BufReader};

    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let (url, server) = vllm(Arc::new(|turn, _| format!("Answer number {turn}."))).await;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "gw.yaml", &model(&url));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_uniagent"))
        .current_dir(dir.path())
        .args([
            "gateway",
            "--config",
            "gw.yaml",
            "--port",
            "0",
            "--out",
            "out",
            "--cassettes",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let Some(base) = line.trim().strip_prefix("listening on ").map(str::to_owned) else {
        let _ = child.kill();
        panic!("first line: {line:?}");
    };
    let client = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let client = client.clone();
        let url = format!("{base}{path}");
        async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.text().await.unwrap()
        }
    };
    let hi = json!({"role": "user", "content": "hi"});
    let first: Value = serde_json::from_str(
        &post(
            "/sessions/g1/v1/chat/completions".into(),
            json!({"model": "m", "messages": [hi]}),
        )
        .await,
    )
    .unwrap();
    let answer = first["choices"][0]["message"].clone();
    assert_eq!(answer["content"], "Answer number 0.");
    let streamed = post(
        "/sessions/g1/v1/chat/completions".into(),
        json!({"model": "m", "stream": true,
               "messages": [hi, answer, {"role": "user", "content": "again"}]}),
    )
    .await;
    assert!(streamed.contains("Answer number 1."), "{streamed}");
    post("/sessions/g1/end".into(), Value::Null).await;
    post(
        "/sessions/g2/v1/messages".into(),
        json!({"model": "m", "max_tokens": 32, "messages": [hi]}),
    )
    .await;
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
    server.abort();

    let file = dir.path().join("out/cassettes.jsonl");
    let lines = cassettes(&file);
    let ids: Vec<&Value> = lines.iter().map(|c| &c["id"]).collect();
    assert_eq!(ids, [&json!("g1"), &json!("g2")]);
    assert_eq!(lines[0]["kind"], "gateway");
    assert_eq!(lines[0]["generator"], "vllm");
    let out = uniagent(dir.path(), &["replay", "out/cassettes.jsonl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(
        s,
        json!({"tools": "recorded", "replayed": 2, "identical": 2, "diverged": []})
    );
    let out = uniagent(
        dir.path(),
        &["replay", "out/cassettes.jsonl", "--tools", "live"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("gateway cassette") && stderr(&out).contains("--tools recorded"),
        "{}",
        stderr(&out)
    );

    let mut tampered = lines.clone();
    let output = &mut tampered[0]["exchanges"][1]["generation"]["output"];
    let id = output["token_ids"][0].as_u64().unwrap();
    output["token_ids"][0] = json!(id + 1);
    write_lines(&dir.path().join("tampered.jsonl"), &tampered);
    let out = uniagent(dir.path(), &["replay", "tampered.jsonl"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["identical"], 1);
    let d = &s["diverged"][0];
    assert_eq!(d["id"], "g1");
    assert_eq!(d["divergence"]["kind"], "answer");
    assert_eq!(d["divergence"]["request"], 1);
}

/// The in-process `tch` engine (the tiny random Qwen2 fixture, sampled at temperature 1 with
/// per-request seeds) records cassettes that replay identically without loading the model.
#[cfg(feature = "tch")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tch_cassettes_carry_seeds_and_replay_without_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy");
    std::fs::create_dir(&policy).unwrap();
    common::link_tiny_qwen2(&policy);
    write(
        dir.path(),
        "run.yaml",
        "tasks:\n  generate: {count: 2, seed: 5}\nenvironment:\n  type: file-lookup\n  sandbox: {type: host}\n\
model: {type: tch, dir: policy, seed: 11, limits: {max_response_len: 48}}\n\
loop: {max_turns: 2, sampling: {temperature: 1.0, max_tokens: 16}}\noutput: {cassettes: true}\n",
    );
    let out = uniagent(dir.path(), &["run", "run.yaml", "--out", "out", "--quiet"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = cassettes(&dir.path().join("out/cassettes.jsonl"));
    assert_eq!(lines.len(), 2);
    for c in &lines {
        assert_eq!(c["generator"], "tch");
        let first = &c["steps"][0];
        assert_eq!(first["step"], "generate", "{c}");
        assert!(first["request"]["sampling"]["seed"].is_u64(), "{first}");
    }
    // A recorded replay reads only the codec from the policy directory, not the weights.
    let out = uniagent(dir.path(), &["replay", "out/cassettes.jsonl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(summary(&out)["identical"], 2);
}
