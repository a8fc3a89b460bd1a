//! The `uniagent-sandbox` binary as deployments start it: only `--host --port --auth-token`,
//! `TERM` unset, an empty `HOME` and an empty working directory.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use uniagent_core::testing::spawn_with_first_line;

#[test]
fn starts_fast_and_serves_sessions() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (mut child, line) = spawn_with_first_line(
        Command::new(env!("CARGO_BIN_EXE_uniagent-sandbox"))
            .args(["--host", "127.0.0.1", "--port", "0", "--auth-token", "T"])
            .env_remove("TERM")
            .env("HOME", home.path())
            .current_dir(cwd.path()),
    );
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let alive = rt.block_on(async {
        loop {
            if let Ok(r) = client
                .get(format!("{url}/is_alive"))
                .header("X-API-Key", "T")
                .send()
                .await
            {
                break r.json::<serde_json::Value>().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let ready = started.elapsed();
    assert_eq!(alive, serde_json::json!({"is_alive": true, "message": ""}));
    assert!(ready < Duration::from_millis(900), "ready after {ready:?}");
    let out = rt.block_on(async {
        let post = |path: &str, body: serde_json::Value| {
            client
                .post(format!("{url}{path}"))
                .header("X-API-Key", "T")
                .json(&body)
                .send()
        };
        post(
            "/create_session",
            serde_json::json!({"session_type": "bash"}),
        )
        .await
        .unwrap();
        post(
            "/run_in_session",
            serde_json::json!({"action_type": "bash", "command": "pwd; echo $TERM", "timeout": 5}),
        )
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()
    });
    assert_eq!(
        out["output"],
        format!("{}\ndumb\n", cwd.path().canonicalize().unwrap().display())
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn version_and_missing_token() {
    let out = Command::new(env!("CARGO_BIN_EXE_uniagent-sandbox"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
    let out = Command::new(env!("CARGO_BIN_EXE_uniagent-sandbox"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "--auth-token is required, as in swerex-remote"
    );
}

#[test]
fn serves_request_metrics_by_route_with_metrics_addr() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_uniagent-sandbox"))
        .args(["--port", "0", "--auth-token", "T"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    // The announcement is a line of stderr (logs may come before it).
    // Kept open to the end: a closed pipe would fail the server's later writes.
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let metrics = stderr
        .by_ref()
        .take(20)
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("metrics on ").map(str::to_owned))
        .expect("no `metrics on` line on stderr");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scrape = rt.block_on(async {
        let client = reqwest::Client::new();
        for key in ["T", "T", "wrong"] {
            client
                .get(format!("{url}/is_alive"))
                .header("X-API-Key", key)
                .send()
                .await
                .unwrap();
        }
        client
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    let _ = child.kill();
    let _ = child.wait();
    drop(stderr);
    let counted: Vec<&str> = scrape
        .lines()
        .filter(|l| l.starts_with("uniagent_sandbox_server_requests_total{"))
        .collect();
    // Two authorized requests reached the route; the refused one never did.
    assert_eq!(counted.len(), 1, "{scrape}");
    assert!(counted[0].contains("route=\"/is_alive\""), "{scrape}");
    assert!(counted[0].contains("status=\"200\""), "{scrape}");
    assert!(counted[0].ends_with(" 2"), "{scrape}");
    assert!(scrape.contains("process_resident_memory_bytes"), "{scrape}");
}
