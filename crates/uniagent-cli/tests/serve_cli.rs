//! `uniagent serve`: the rollout service verl's agent loop calls. A generation bridge in the
//! test stands in for the Python package's (it speaks the bridge protocol of `docs/verl.md`
//! and answers as a scripted policy through the real Qwen2.5 tokenizer); `uniagent run` with a
//! vLLM stand-in answering the same tokens is the reference the service must match, token for
//! token. Also: the config's tasks, 422s naming the field, failures as `status: failure`, 429
//! beyond `--max-in-flight`, a client that goes away, and SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::{Json, Router};
use common::{spawn_listening, stderr, write};
use serde_json::{json, Value};
use uniagent_core::codec::Codec;

/// Every test ends within this, whatever the service does.
const TEST_DEADLINE: Duration = Duration::from_secs(180);

fn tokenizer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../uniagent-core/tests/fixtures/tokenizers/qwen2.5")
}

/// The policy's tokens for a prompt (stop id appended), the turn and made-up log probs.
fn sample(codec: &Codec, prompt: &[u32], stop: u32) -> (Vec<u32>, usize, Vec<f64>) {
    let text = codec.decode(prompt, false).unwrap();
    let turn = text.matches("<|im_start|>assistant").count() - 1;
    let mut ids = codec
        .encode(&common::file_reader_text(turn, &text))
        .unwrap();
    ids.push(stop);
    let lps = (0..ids.len()).map(|i| -0.25 * (i % 7) as f64).collect();
    (ids, turn, lps)
}

async fn serve_app(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    url
}

/// What the bridge was asked.
type Seen = Arc<Mutex<Vec<Value>>>;

/// A generation bridge answering as the file-reader policy, stamping turn `k` with weight version `3 + k`.
async fn bridge(seen: Seen) -> String {
    let codec = Arc::new(Codec::from_dir(tokenizer_dir()).unwrap());
    let app = Router::new().route(
        "/generate",
        post(move |Json(body): Json<Value>| {
            let codec = Arc::clone(&codec);
            let seen = Arc::clone(&seen);
            async move {
                let prompt: Vec<u32> = serde_json::from_value(body["prompt_ids"].clone()).unwrap();
                let stop = body["stop_token_ids"][0].as_u64().unwrap() as u32;
                let (ids, turn, lps) = sample(&codec, &prompt, stop);
                seen.lock().unwrap().push(body);
                Json(
                    json!({"token_ids": ids, "log_probs": lps, "stop_reason": "completed",
                            "global_steps": 3 + turn, "num_preempted": 0}),
                )
            }
        }),
    );
    format!("{}/generate", serve_app(app).await)
}

/// vLLM's `/v1/completions` answering the same tokens, for `uniagent run`.
async fn vllm() -> String {
    let codec = Arc::new(Codec::from_dir(tokenizer_dir()).unwrap());
    let app = Router::new().route(
        "/v1/completions",
        post(move |Json(body): Json<Value>| {
            let codec = Arc::clone(&codec);
            async move {
                let prompt: Vec<u32> = serde_json::from_value(body["prompt"].clone()).unwrap();
                let stop = body["stop_token_ids"][0].as_u64().unwrap() as u32;
                let (ids, _, lps) = sample(&codec, &prompt, stop);
                Json(json!({"choices": [{"index": 0, "text": "", "finish_reason": "stop",
                    "logprobs": {"tokens": ids.iter().map(|i| format!("token_id:{i}")).collect::<Vec<_>>(),
                                 "token_logprobs": lps}}]}))
            }
        }),
    );
    serve_app(app).await
}

/// A bridge that answers every generation with `status`, or never when `status` is `None`.
async fn broken_bridge(status: Option<u16>) -> String {
    let app = Router::new().route(
        "/generate",
        post(move || async move {
            match status {
                Some(code) => (
                    axum::http::StatusCode::from_u16(code).unwrap(),
                    Json(json!({"error": "generate raised RuntimeError"})),
                ),
                None => std::future::pending().await,
            }
        }),
    );
    format!("{}/generate", serve_app(app).await)
}

const ENVIRONMENT: &str =
    "environment:\n  type: file-lookup\n  sandbox: {type: host}\nloop: {max_turns: 4}\n";

fn serve_config(dir: &Path) -> PathBuf {
    write(
        dir,
        "serve.yaml",
        &format!(
            "tasks:\n  generate: {{count: 2, seed: 5}}\n{ENVIRONMENT}model:\n  type: verl\n  tokenizer: {}\n  bridge_timeout: 20\n",
            tokenizer_dir().display()
        ),
    )
}

/// A running `uniagent serve`, killed when dropped.
struct Service {
    child: std::process::Child,
    url: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_service(config: &Path, extra: &[&str]) -> Service {
    let mut args: Vec<&std::ffi::OsStr> = vec!["serve".as_ref(), config.as_os_str()];
    args.extend(["--port", "0"].iter().map(std::ffi::OsStr::new));
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let (child, url) = spawn_listening(&args);
    Service { child, url }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn get(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn post_rollout(url: &str, body: &Value) -> (u16, Value) {
    let response = client()
        .post(format!("{url}/v1/rollouts"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn rollout_body(task: &Value, bridge: &str, sample: u32) -> Value {
    json!({
        "task": task,
        "request_id": format!("req-{}-{sample}", task["id"].as_str().unwrap()),
        "sampling_params": {"temperature": 1.0, "top_p": 0.95, "logprobs": 1, "repetition_penalty": 1.0},
        "bridge_url": bridge,
        "sample": sample,
        "group_size": 2,
    })
}

async fn within_deadline<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(TEST_DEADLINE, f)
        .await
        .expect("the test passed its deadline")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_match_uniagent_run_token_for_token() {
    within_deadline(async {
        let dir = tempfile::tempdir().unwrap();
        // The reference: `uniagent run` on the same tasks, two samples each.
        let vllm = vllm().await;
        write(
            dir.path(),
            "run.yaml",
            &format!(
                "tasks:\n  generate: {{count: 2, seed: 5}}\n{ENVIRONMENT}runner: {{samples_per_task: 2}}\nmodel:\n  type: vllm\n  tokenizer: {}\n  http: {{endpoints: [\"{vllm}\"], model: m, timeout: 30}}\n",
                tokenizer_dir().display()
            ),
        );
        let dir_path = dir.path().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            common::run_in(&dir_path, &["run", "run.yaml", "--out", "out", "--quiet"])
        })
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let reference: Vec<Value> = std::fs::read_to_string(dir.path().join("out/trajectories.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();

        let seen = Seen::default();
        let bridge = bridge(Arc::clone(&seen)).await;
        let service = start_service(&serve_config(dir.path()), &[]);
        let tasks = get(&format!("{}/v1/tasks", service.url)).await;
        let tasks = tasks["tasks"].as_array().unwrap().clone();
        assert_eq!(tasks.len(), 2);
        let info = get(&format!("{}/v1/info", service.url)).await;
        assert_eq!(info["environment"], "file-lookup");
        assert_eq!(info["in_flight"], 0);

        for task in &tasks {
            let (status, answer) = post_rollout(&service.url, &rollout_body(task, &bridge, 1)).await;
            assert_eq!(status, 200, "{answer}");
            let id = format!("{}:1", task["id"].as_str().unwrap());
            assert_eq!(answer["id"], id);
            assert_eq!(answer["status"], "success", "{answer}");
            assert_eq!(answer["exit_reason"], "finished");
            assert_eq!(answer["reward_score"], 1.0);
            assert_eq!(answer["extra_fields"]["success"], true);
            let expected = reference.iter().find(|t| t["id"] == id).unwrap();
            for field in ["prompt_ids", "response_ids", "response_mask", "response_logprobs"] {
                assert_eq!(answer[field], expected[field], "{field} of {id}");
            }
            assert_eq!(answer["num_turns"], expected["num_turns"]);
            // Two turns, stamped 3 and 4: every sampled token has its turn's version, the
            // others none.
            let mask = answer["response_mask"].as_array().unwrap();
            let versions = answer["extra_fields"]["weight_versions"].as_array().unwrap();
            assert_eq!(versions.len(), mask.len());
            for (m, v) in mask.iter().zip(versions) {
                assert_eq!(m == 1, !v.is_null(), "{m} {v}");
            }
            assert_eq!(answer["extra_fields"]["min_global_steps"], 3);
            assert_eq!(answer["extra_fields"]["max_global_steps"], 4);
            assert_eq!(answer["metrics"]["num_preempted"], 0);
        }
        // verl's request id and sampling parameters reach the bridge unchanged, on every turn.
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 4);
        for body in &seen {
            assert!(body["request_id"].as_str().unwrap().starts_with("req-"));
            assert_eq!(
                body["sampling_params"],
                json!({"temperature": 1.0, "top_p": 0.95, "logprobs": 1, "repetition_penalty": 1.0})
            );
            assert!(body["max_tokens"].as_u64().unwrap() > 0);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rows_are_422s_and_failures_are_answers() {
    within_deadline(async {
        let dir = tempfile::tempdir().unwrap();
        let service = start_service(&serve_config(dir.path()), &[]);
        let tasks = get(&format!("{}/v1/tasks", service.url)).await;
        let task = tasks["tasks"][0].clone();
        let bridge = "http://127.0.0.1:9/generate";

        let mut no_task = rollout_body(&task, bridge, 0);
        no_task.as_object_mut().unwrap().remove("task");
        let mut bad_role = rollout_body(&task, bridge, 0);
        bad_role["task"]["messages"][0]["role"] = json!(5);
        let mut bad_url = rollout_body(&task, bridge, 0);
        bad_url["bridge_url"] = json!("not a url");
        let mut refused_task = rollout_body(&task, bridge, 0);
        refused_task["task"]["metadata"] = json!({});
        for (body, field) in [
            (no_task, "task"),
            (bad_role, "task.messages[0].role"),
            (bad_url, "bridge_url"),
            (refused_task, "task"),
        ] {
            let (status, answer) = post_rollout(&service.url, &body).await;
            assert_eq!(status, 422, "{answer}");
            assert_eq!(answer["error"]["type"], "invalid_request");
            assert_eq!(answer["error"]["field"], field, "{answer}");
        }
        let response = client()
            .post(format!("{}/v1/rollouts", service.url))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 422);

        // A bridge whose generate raised, and no bridge at all: answered, as failures.
        for bridge in [broken_bridge(Some(502)).await, bridge.to_owned()] {
            let (status, answer) =
                post_rollout(&service.url, &rollout_body(&task, &bridge, 0)).await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["status"], "failure", "{answer}");
            assert_eq!(answer["exit_reason"], "model_error");
            assert_eq!(answer["exit_class"], "infrastructure");
            assert_eq!(answer["reward_score"], Value::Null);
            assert!(answer["error"].as_str().is_some(), "{answer}");
        }
    })
    .await;
}

async fn in_flight(url: &str) -> u64 {
    get(&format!("{url}/v1/info")).await["in_flight"]
        .as_u64()
        .unwrap()
}

async fn wait_in_flight(url: &str, want: u64) {
    let t0 = Instant::now();
    while in_flight(url).await != want {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "in_flight never became {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_service_answers_429_and_a_gone_client_frees_its_slot() {
    within_deadline(async {
        let dir = tempfile::tempdir().unwrap();
        let service = start_service(&serve_config(dir.path()), &["--max-in-flight", "1"]);
        let tasks = get(&format!("{}/v1/tasks", service.url)).await;
        let task = tasks["tasks"][0].clone();
        let hanging = broken_bridge(None).await;

        // A client that gives up after 2 s on a rollout whose generation never answers.
        let url = service.url.clone();
        let body = rollout_body(&task, &hanging, 0);
        let impatient = tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{url}/v1/rollouts"))
                .timeout(Duration::from_secs(2))
                .json(&body)
                .send()
                .await
        });
        wait_in_flight(&service.url, 1).await;
        let response = client()
            .post(format!("{}/v1/rollouts", service.url))
            .json(&rollout_body(&task, &hanging, 1))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 429);
        assert_eq!(response.headers()["retry-after"], "1");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["type"], "busy");

        assert!(impatient.await.unwrap().is_err(), "the client timed out");
        // Its rollout is cancelled: the slot is free again.
        wait_in_flight(&service.url, 0).await;
    })
    .await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_rollouts_in_flight_and_exits() {
    within_deadline(async {
        let dir = tempfile::tempdir().unwrap();
        let mut service = start_service(&serve_config(dir.path()), &[]);
        let tasks = get(&format!("{}/v1/tasks", service.url)).await;
        let hanging = broken_bridge(None).await;
        let url = service.url.clone();
        let body = rollout_body(&tasks["tasks"][0], &hanging, 0);
        let waiting = tokio::spawn(async move { post_rollout_raw(&url, &body).await });
        wait_in_flight(&service.url, 1).await;

        let pid = nix::unistd::Pid::from_raw(service.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(status) = service.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "serve ignored SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(status.code(), Some(0));
        // The waiting client got its rollout back as a cancelled failure (or a closed
        // connection), not a hang.
        match waiting.await.unwrap() {
            Ok((200, answer)) => {
                assert_eq!(answer["status"], "failure", "{answer}");
                assert_eq!(answer["exit_reason"], "cancelled");
            }
            Ok((code, answer)) => panic!("{code}: {answer}"),
            Err(e) => assert!(!e.is_timeout(), "{e}"),
        }
    })
    .await;
}

async fn post_rollout_raw(url: &str, body: &Value) -> reqwest::Result<(u16, Value)> {
    let response = client()
        .post(format!("{url}/v1/rollouts"))
        .json(body)
        .send()
        .await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_box_harness_is_served_through_the_bridge() {
    let Some(python) = common::gateway_sdk_python() else {
        return;
    };
    within_deadline(async {
        let dir = tempfile::tempdir().unwrap();
        let harness = common::repo_root().join("examples/harness");
        let config = write(
            dir.path(),
            "serve.yaml",
            &format!(
                "tasks:\n  generate: {{count: 1, seed: 5}}\n{ENVIRONMENT}model:\n  type: verl\n  tokenizer: {tok}\n  bridge_timeout: 20\n\
trainer:\n  rollout:\n    source: harness\n    command: [{py}, file_agent.py]\n    cwd: {cwd}\n    timeout: 60\n    reward: {{command: [{py}, grade.py]}}\n",
                tok = tokenizer_dir().display(),
                py = python.display(),
                cwd = harness.display(),
            ),
        );
        let seen = Seen::default();
        let bridge = bridge(Arc::clone(&seen)).await;
        let service = start_service(&config, &[]);
        let tasks = get(&format!("{}/v1/tasks", service.url)).await;
        let task = tasks["tasks"][0].clone();
        let (status, answer) = post_rollout(&service.url, &rollout_body(&task, &bridge, 3)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["status"], "success", "{answer}");
        assert_eq!(answer["id"], format!("{}:3", task["id"].as_str().unwrap()));
        // The SDK agent read the file and answered right: graded 1 by grade.py.
        assert_eq!(answer["reward_score"], 1.0, "{answer}");
        // Both turns went through the bridge with verl's request id; every token they sampled
        // is in the chain with mask 1 and its turn's weight version.
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        let sampled: usize = answer["response_mask"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| **m == 1)
            .count();
        assert!(sampled > 0);
        assert_eq!(answer["extra_fields"]["min_global_steps"], 3, "{answer}");
        assert_eq!(answer["extra_fields"]["max_global_steps"], 4, "{answer}");
        assert!(seen.iter().all(|b| b["request_id"] == seen[0]["request_id"]));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_and_status() {
    use std::io::{BufRead, BufReader};
    within_deadline(async {
        let dir = tempfile::tempdir().unwrap();
        let config = serve_config(dir.path());
        let mut child = common::uniagent()
            .args(["serve", config.to_str().unwrap(), "--port", "0"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_owned();
        // stderr is drained to its end (a closed pipe would fail the service's later writes).
        let stderr = child.stderr.take().unwrap();
        let (found, announced) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(m) = line.strip_prefix("metrics on ") {
                    let _ = found.send(m.to_owned());
                }
            }
        });
        let metrics = announced.recv_timeout(Duration::from_secs(30));
        let service = Service { child, url };
        let metrics = metrics.expect("a `metrics on` line");
        let tasks = get(&format!("{}/v1/tasks", service.url)).await;
        let mut bad = rollout_body(&tasks["tasks"][0], "http://127.0.0.1:9/generate", 0);
        bad.as_object_mut().unwrap().remove("request_id");
        for _ in 0..2 {
            assert_eq!(post_rollout(&service.url, &bad).await.0, 422);
        }
        let text = client()
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let count = |route: &str, status: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("uniagent_serve_requests_total{")
                        && l.contains(&format!("route=\"{route}\""))
                        && l.contains(&format!("status=\"{status}\""))
                })
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        assert_eq!(count("/v1/rollouts", "422"), Some(2.0), "{text}");
        assert_eq!(count("/v1/tasks", "200"), Some(1.0), "{text}");
    })
    .await;
}
