//! Shared by the SWE-ReX compatibility tests: finding the SWE-ReX venv, starting servers on free
//! ports in their own process group, and replaying `tests/swerex/scenarios.json` through our
//! client.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use uniagent_core::sandbox::*;
use uniagent_core::testing::{free_port, sandbox_server_args};
use uniagent_core::Error;
use uniagent_sandboxes::client::{RemoteRuntime, RemoteRuntimeOptions};

pub const SCENARIOS: &str = include_str!("../swerex/scenarios.json");

/// The SWE-ReX venv: `Some` when `UNIAGENT_SWEREX_VENV` is set (and then it must be complete),
/// `None` (skip, with a printed reason) outside `scripts/test`.
pub fn swerex_venv() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("UNIAGENT_SWEREX_VENV") else {
        eprintln!(
            "SKIP: UNIAGENT_SWEREX_VENV is not set (scripts/test sets it after scripts/setup/20-swerex.sh installs swe-rex 1.4.0)"
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    for tool in ["bin/python", "bin/swerex-remote"] {
        assert!(
            dir.join(tool).exists(),
            "UNIAGENT_SWEREX_VENV={} has no {tool}: run scripts/setup/20-swerex.sh",
            dir.display()
        );
    }
    Some(dir)
}

/// The `uniagent-sandbox` binary cargo built for this package's tests.
pub fn our_server_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))
}

/// A server child process in its own process group, killed with its group on drop.
pub struct ServerUnderTest {
    pub child: Child,
    pub url: String,
    pub token: String,
    pub dir: tempfile::TempDir,
}

impl ServerUnderTest {
    /// Starts `program args... --host 127.0.0.1 --port P --auth-token T` with `TERM` unset, an
    /// empty `HOME` and an empty working directory, and waits until it is alive.
    pub async fn start(program: &Path, extra_args: &[&str]) -> Self {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let (work, home) = (dir.path().join("work"), dir.path().join("home"));
        std::fs::create_dir(&work).unwrap();
        std::fs::create_dir(&home).unwrap();
        let port = free_port().unwrap();
        let token = format!("tok-{:016x}", fastrand::u64(..));
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = std::process::Command::new(program)
            .args(extra_args)
            .args(sandbox_server_args(port, &token))
            .current_dir(&work)
            .env_remove("TERM")
            .env("HOME", &home)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let server = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            token,
            dir,
        };
        let runtime = server.client();
        if let Err(e) = runtime.wait_until_alive(Duration::from_secs(30)).await {
            let log =
                std::fs::read_to_string(server.dir.path().join("server.log")).unwrap_or_default();
            panic!("{} did not come up: {e}\n{log}", program.display());
        }
        server
    }

    pub fn client(&self) -> RemoteRuntime {
        RemoteRuntime::new(
            &self.url,
            Some(self.token.clone()),
            RemoteRuntimeOptions::default(),
        )
        .unwrap()
    }
}

impl Drop for ServerUnderTest {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

pub fn steps() -> Vec<Value> {
    let doc: Value = serde_json::from_str(SCENARIOS).unwrap();
    doc["steps"].as_array().unwrap().clone()
}

/// Replaces `{tmp}` in every string of `value`.
pub fn substitute(value: &Value, tmp: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("{tmp}", tmp)),
        Value::Array(a) => Value::Array(a.iter().map(|v| substitute(v, tmp)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), substitute(v, tmp)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn parse<T: serde::de::DeserializeOwned>(step: &Value) -> T {
    serde_json::from_value(step["request"].clone())
        .unwrap_or_else(|e| panic!("bad request in {step}: {e}"))
}

fn to_json<T: serde::Serialize>(value: uniagent_core::Result<T>) -> uniagent_core::Result<Value> {
    value.map(|v| serde_json::to_value(v).unwrap())
}

/// Runs one scenario step through `client`; the response as JSON.
pub async fn run_step(
    client: &RemoteRuntime,
    step: &Value,
    local_tmp: &Path,
) -> uniagent_core::Result<Value> {
    match step["op"].as_str().unwrap() {
        "is_alive" => to_json(client.is_alive(None).await),
        "create_session" => to_json(
            client
                .create_session(&parse::<CreateSessionRequest>(step))
                .await,
        ),
        "run_in_session" => to_json(client.run_in_session(&parse::<Action>(step)).await),
        "close_session" => to_json(
            client
                .close_session(&parse::<CloseSessionRequest>(step))
                .await,
        ),
        "execute" => to_json(client.execute(&parse::<Command>(step)).await),
        "read_file" => to_json(client.read_file(&parse::<ReadFileRequest>(step)).await),
        "write_file" => client
            .write_file(&parse::<WriteFileRequest>(step))
            .await
            .map(|()| json!({})),
        "close" => client.close().await.map(|()| json!({})),
        "upload_file" => {
            let hex = step["bytes_hex"].as_str().unwrap();
            let data = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let target_path = step["target_path"].as_str().unwrap().to_owned();
            client
                .upload(UploadRequest {
                    data,
                    target_path,
                    unzip: false,
                })
                .await
                .map(|()| json!({}))
        }
        "upload_dir" => {
            let source = local_tmp.join(format!("upload-{:08x}", fastrand::u32(..)));
            let files: BTreeMap<String, String> =
                serde_json::from_value(step["files"].clone()).unwrap();
            for (name, content) in files {
                let path = source.join(name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, content).unwrap();
            }
            client
                .upload_path(&source, step["target_path"].as_str().unwrap())
                .await
                .map(|()| json!({}))
        }
        other => panic!("unknown op {other}"),
    }
}

/// Replays every scenario step through `client`; returns the list of mismatches.
pub async fn replay_scenarios(client: &RemoteRuntime) -> Vec<String> {
    let remote_tmp = tempfile::tempdir().unwrap();
    let local_tmp = tempfile::tempdir().unwrap();
    let tmp = remote_tmp.path().to_str().unwrap().to_owned();
    let mut failures = Vec::new();
    for step in steps() {
        let step = substitute(&step, &tmp);
        let name = step["name"].as_str().unwrap().to_owned();
        let result = run_step(client, &step, local_tmp.path()).await;
        if let Some(problem) = judge(&step, result) {
            failures.push(format!("{name}: {problem}"));
        }
    }
    failures
}

/// `None` when `result` is what the step expects.
pub fn judge(step: &Value, result: uniagent_core::Result<Value>) -> Option<String> {
    match (step.get("error").and_then(Value::as_str), result) {
        (Some(class), Err(Error::Runtime { exception, .. })) => {
            if exception.class_path != class {
                return Some(format!(
                    "raised {} ({}), want {class}",
                    exception.class_path, exception.message
                ));
            }
            let needle = step
                .get("message_contains")
                .and_then(Value::as_str)
                .unwrap_or("");
            (!exception.message.contains(needle))
                .then(|| format!("message {:?} lacks {needle:?}", exception.message))
        }
        (Some(class), other) => Some(format!("want {class}, got {other:?}")),
        (None, Err(e)) => Some(format!("unexpected error {e}")),
        (None, Ok(response)) => {
            let expect = step["expect"].as_object().unwrap();
            let wrong: Vec<String> = expect
                .iter()
                .filter(|(k, v)| response.get(k.as_str()) != Some(v))
                .map(|(k, v)| format!("{k}: got {:?}, want {v}", response.get(k.as_str())))
                .collect();
            (!wrong.is_empty()).then(|| wrong.join("; "))
        }
    }
}
