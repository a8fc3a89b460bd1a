//! Shared helpers of the uniagent-cli tests: the binary, temp configs, and an
//! OpenAI-compatible chat-completions test server whose answers a closure scripts.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// The `uniagent` binary under test.
pub fn uniagent() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_uniagent"))
}

/// Starts a `uniagent` server (`args` must make it listen, e.g. `--port 0`) and returns the
/// child and the base URL of its first stdout line, `listening on http://HOST:PORT`. Another
/// first line kills the child and fails the test.
pub fn spawn_listening(args: &[&std::ffi::OsStr]) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut child = uniagent()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = BufReader::new(stdout).read_line(&mut line);
    }
    match line.trim().strip_prefix("listening on ") {
        Some(base) => (child, base.to_owned()),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("first line: {line:?}");
        }
    }
}

/// Runs `uniagent args...` in `dir` and returns its output.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    uniagent().current_dir(dir).args(args).output().unwrap()
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A JSON-lines file (`trajectories.jsonl`, `metrics.jsonl`), one value per line.
pub fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The last non-empty stderr line (the error line; progress bars come before it).
pub fn error_line(o: &Output) -> String {
    stderr(o)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// Decides the assistant message for a chat-completions request body.
pub type Responder = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// A running test server and every request body it received.
pub struct ChatServer {
    /// `http://127.0.0.1:PORT/v1`
    pub base_url: String,
    /// Request bodies in arrival order.
    pub requests: Arc<Mutex<Vec<Value>>>,
    handle: tokio::task::JoinHandle<()>,
}

impl Drop for ChatServer {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

#[derive(Clone)]
struct ServerState {
    responder: Responder,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// Checks a request the way the OpenAI API does for the fields we rely on, and answers in the
/// chat-completions wire format.
async fn completions(
    State(s): State<ServerState>,
    Json(body): Json<Value>,
) -> (axum::http::StatusCode, Json<Value>) {
    s.requests.lock().unwrap().push(body.clone());
    if let Err(e) = check_request(&body) {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": e, "type": "invalid_request_error"}})),
        );
    }
    let message = (s.responder)(&body);
    let finish = if message
        .get("tool_calls")
        .is_some_and(|c| c.as_array().is_some_and(|a| !a.is_empty()))
    {
        "tool_calls"
    } else {
        "stop"
    };
    let response = json!({
        "id": format!("chatcmpl-{}", fastrand::u64(..)),
        "object": "chat.completion",
        "created": 1_700_000_000u64,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    (axum::http::StatusCode::OK, Json(response))
}

/// The request rules of the chat-completions API that a server enforces: a model, a non-empty
/// list of messages with known roles, tool messages answering a call id, tools as functions.
pub fn check_request(body: &Value) -> Result<(), String> {
    body["model"]
        .as_str()
        .filter(|m| !m.is_empty())
        .ok_or("`model` is required")?;
    let messages = body["messages"]
        .as_array()
        .filter(|m| !m.is_empty())
        .ok_or("`messages` must be a non-empty list")?;
    let mut call_ids = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"]
            .as_str()
            .ok_or(format!("messages[{i}].role is required"))?;
        match role {
            "system" | "developer" | "user" => {
                if !(m["content"].is_string() || m["content"].is_array()) {
                    return Err(format!("messages[{i}].content must be a string or parts"));
                }
            }
            "assistant" => {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let id = c["id"]
                        .as_str()
                        .ok_or(format!("messages[{i}].tool_calls[].id is required"))?;
                    if c["type"] != "function" || !c["function"]["arguments"].is_string() {
                        return Err(format!(
                            "messages[{i}].tool_calls[] must be functions with string arguments"
                        ));
                    }
                    call_ids.insert(id.to_owned());
                }
            }
            "tool" => {
                let id = m["tool_call_id"]
                    .as_str()
                    .ok_or(format!("messages[{i}].tool_call_id is required"))?;
                if !call_ids.contains(id) {
                    return Err(format!("messages[{i}] answers unknown tool call `{id}`"));
                }
            }
            other => return Err(format!("messages[{i}].role `{other}` is not a chat role")),
        }
    }
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if t["type"] != "function" || !t["function"]["name"].is_string() {
            return Err(format!(
                "tools[{i}] must be {{type: function, function: {{name, parameters}}}}"
            ));
        }
    }
    Ok(())
}

impl ChatServer {
    /// Starts a server on a free port.
    pub async fn start(responder: Responder) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = ServerState {
            responder,
            requests: Arc::clone(&requests),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route(
                "/v1/models",
                get(|| async {
                    Json(json!({"object": "list", "data": [{"id": "replay", "object": "model"}]}))
                }),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let handle = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            requests,
            handle,
        }
    }
}

/// An assistant message calling `name` with `args`.
pub fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]
    })
}

/// Assistant turns so far in a request.
pub fn assistant_turns(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// The text of the first user message.
pub fn first_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Is a Docker daemon reachable (the docker tests skip, saying so, when not)?
pub fn docker_available() -> bool {
    std::process::Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// True, after saying so on stderr, when no Docker daemon is reachable and a docker test skips.
pub fn skip_without_docker() -> bool {
    let skip = !docker_available();
    if skip {
        eprintln!("SKIPPED: no Docker daemon is reachable");
    }
    skip
}

/// Links the tiny random Qwen2 fixture (uniagent-train's weights, uniagent-core's Qwen2.5 codec)
/// into `dir`, making it a model directory for the `tch` engine.
pub fn link_tiny_qwen2(dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let weights = root.join("../uniagent-train/tests/fixtures/tiny-qwen2");
    let codec = root.join("../uniagent-core/tests/fixtures/tokenizers/qwen2.5");
    for (from, name) in [
        (&weights, "config.json"),
        (&weights, "model.safetensors"),
        (&codec, "tokenizer.json"),
        (&codec, "tokenizer_config.json"),
        (&codec, "chat_template.jinja"),
    ] {
        std::os::unix::fs::symlink(from.join(name), dir.join(name)).unwrap();
    }
}

/// The file a file-lookup question asks about ("... code of NAME?"), `nothing` if none.
pub fn asked_file(body: &Value) -> String {
    first_user_text(body)
        .split("code of ")
        .nth(1)
        .and_then(|s| s.split('?').next())
        .unwrap_or("nothing")
        .to_owned()
}

/// A file-lookup agent: reads the file the question names, then finishes with the tool's output.
pub fn file_reader(delay: std::time::Duration) -> Responder {
    Arc::new(move |body: &Value| {
        std::thread::sleep(delay);
        let target = asked_file(body);
        let turn = assistant_turns(body);
        if turn == 0 {
            tool_call(
                "c0",
                "execute_bash",
                json!({"command": format!("cat data/{target}.txt")}),
            )
        } else {
            let last_tool = body["messages"]
                .as_array()
                .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default();
            let answer: String = last_tool.chars().filter(char::is_ascii_digit).collect();
            tool_call("c1", "finish", json!({"answer": answer}))
        }
    })
}

/// A Hermes tool call as a Qwen-family policy writes it.
pub fn hermes_call(name: &str, args: Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        json!({"name": name, "arguments": args})
    )
}

/// The file-lookup policy as text, given its turn and the decoded context: read the asked
/// file, then `finish` with the digits of the last observation.
pub fn file_reader_text(turn: usize, text: &str) -> String {
    if turn == 0 {
        let target = text
            .split("What is the code of ")
            .nth(1)
            .and_then(|s| s.split('?').next())
            .unwrap();
        let read = hermes_call(
            "execute_bash",
            json!({"command": format!("cat data/{target}.txt")}),
        );
        return format!("Let me look.\n{read}");
    }
    let last = text.rsplit("<tool_response>").next().unwrap();
    let last = last.split("</tool_response>").next().unwrap();
    let answer: String = last.chars().filter(char::is_ascii_digit).collect();
    hermes_call("finish", json!({"answer": answer}))
}

/// The `openai` SDK's venv (`scripts/setup/60-gateway-clients.sh`), or `None` (skip, with a
/// printed reason) when `UNIAGENT_GATEWAY_VENV` is unset; a set variable without a venv fails.
pub fn gateway_sdk_python() -> Option<PathBuf> {
    let Ok(venv) = std::env::var("UNIAGENT_GATEWAY_VENV") else {
        eprintln!(
            "skipped: UNIAGENT_GATEWAY_VENV is not set (scripts/setup/60-gateway-clients.sh)"
        );
        return None;
    };
    let python = Path::new(&venv).join("bin/python");
    assert!(
        python.exists(),
        "UNIAGENT_GATEWAY_VENV={venv} has no bin/python: run scripts/setup/60-gateway-clients.sh"
    );
    Some(python)
}
