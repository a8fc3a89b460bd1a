//! Shared helpers for the server tests: an in-process server on a free loopback port and a
//! plain reqwest client.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::multipart::{Form, Part};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use uniagent_sandboxes::server::{serve, ServerConfig, ShellOptions};

pub const TOKEN: &str = "test-token";

pub struct TestServer {
    pub url: String,
    pub client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub scratch: tempfile::TempDir,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let scratch = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::new(TOKEN);
        config.shell = ShellOptions {
            scratch_dir: scratch.path().join("scratch"),
            ..ShellOptions::default()
        };
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, config, async move {
            let _ = rx.await;
        }));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        Self {
            url,
            client,
            stop: Some(tx),
            scratch,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.url))
            .header("X-API-Key", TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.url))
            .header("X-API-Key", TOKEN)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `POST /upload` with `form`.
    pub async fn upload_form(&self, form: Form) -> reqwest::Response {
        self.client
            .post(format!("{}/upload", self.url))
            .header("X-API-Key", TOKEN)
            .multipart(form)
            .send()
            .await
            .unwrap()
    }

    pub async fn create(&self, session: &str) -> Value {
        let (status, body) = self
            .post(
                "/create_session",
                json!({"session_type": "bash", "session": session}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// `run_in_session` with `check: silent`; returns (status, body).
    pub async fn run(&self, session: &str, command: &str, timeout: Option<f64>) -> (u16, Value) {
        self.post(
            "/run_in_session",
            json!({"action_type": "bash", "session": session, "command": command, "timeout": timeout, "check": "silent"}),
        )
        .await
    }

    /// `run_in_session` with `check: silent` and no timeout, sent from a task of its own: for a
    /// command that is still running while the test goes on.
    pub fn spawn_run(&self, session: &str, command: &str) -> JoinHandle<reqwest::Response> {
        let request = self
            .client
            .post(format!("{}/run_in_session", self.url))
            .header("X-API-Key", TOKEN)
            .json(&json!({"action_type": "bash", "session": session, "command": command, "check": "silent"}));
        tokio::spawn(async move { request.send().await.unwrap() })
    }

    /// Runs and expects success; returns (output, exit code).
    pub async fn ok(&self, session: &str, command: &str) -> (String, Value) {
        let (status, body) = self.run(session, command, Some(20.0)).await;
        assert_eq!(status, 200, "{command}: {body}");
        (
            body["output"].as_str().unwrap().to_owned(),
            body["exit_code"].clone(),
        )
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A multipart form whose `file` part is `data`, sent as `file_name`.
pub fn file_form(data: Vec<u8>, file_name: &str) -> Form {
    Form::new().part("file", Part::bytes(data).file_name(file_name.to_owned()))
}

pub fn class_path(body: &Value) -> &str {
    body["swerexception"]["class_path"].as_str().unwrap_or("")
}

pub fn message(body: &Value) -> &str {
    body["swerexception"]["message"].as_str().unwrap_or("")
}

pub fn pid_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}
