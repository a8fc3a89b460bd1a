//! Fault injection, processes that die: the server SIGKILLed in the middle of
//! `run_in_session`, `execute` and `upload` (the client reports a typed error and never sends
//! the command again), and the process that owns a host deployment SIGKILLed (its server exits
//! by itself, and a later start sweeps what an owner left behind).

#![cfg(all(feature = "host", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use uniagent_core::sandbox::{Action, BashAction, Command, CreateSessionRequest, UploadRequest};
use uniagent_core::testing::spawn_with_first_line;
use uniagent_core::{Deployment, Error, RetryConfig};
use uniagent_sandboxes::client::{RemoteRuntime, RemoteRuntimeOptions};
use uniagent_sandboxes::host::{sweep_orphaned_instances, INSTANCE_ENV, OWNER_ENV};
use uniagent_sandboxes::{HostConfig, HostDeployment};

const HELPER_ENV: &str = "UNIAGENT_FAULT_KILL_HELPER";

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                != Some("Z")
        })
        .unwrap_or(false)
}

async fn gone_within(pid: u32, limit: Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The real server binary on a free port; returns the child and its URL.
fn start_server(dir: &Path) -> (Child, String) {
    let (child, line) = spawn_with_first_line(
        std::process::Command::new(env!("CARGO_BIN_EXE_uniagent-sandbox"))
            .args(["--host", "127.0.0.1", "--port", "0"])
            .env("UNIAGENT_SANDBOX_TOKEN", "tok")
            .current_dir(dir)
            .stderr(Stdio::null()),
    );
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    (child, url)
}

fn client(url: &str) -> RemoteRuntime {
    RemoteRuntime::new(
        url,
        Some("tok".into()),
        RemoteRuntimeOptions {
            retry: RetryConfig {
                max_attempts: 4,
                initial_backoff: Duration::from_millis(20),
                jitter: 0.0,
                ..RetryConfig::default()
            },
            ..RemoteRuntimeOptions::default()
        },
    )
    .unwrap()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Runs `call` against a fresh server, SIGKILLs the server after `after`, and checks the
/// call's error is a typed, non-retryable sandbox error (nothing was resent).
async fn killed_during<F, Fut>(after: Duration, call: F) -> Error
where
    F: FnOnce(RemoteRuntime) -> Fut,
    Fut: std::future::Future<Output = uniagent_core::Result<()>> + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start_server(dir.path());
    let runtime = client(&url);
    let task = tokio::spawn(call(runtime));
    tokio::time::sleep(after).await;
    child.kill().unwrap();
    let _ = child.wait();
    let result = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the call must end")
        .unwrap();
    let err = result.expect_err("the server died mid-call");
    // A broken connection after the request was read is final; one reset before the server
    // read it (or a refused reconnect) may have been retried, and then ran out of attempts.
    assert!(
        matches!(
            err,
            Error::Sandbox {
                retryable: false,
                ..
            } | Error::RetriesExhausted { .. }
        ),
        "{err:?}"
    );
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_gives_typed_errors_and_no_second_run() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    // run_in_session.
    let c = counter.clone();
    killed_during(Duration::from_millis(1500), move |rt| async move {
        rt.create_session(&CreateSessionRequest::new("s")).await?;
        let action = BashAction::new(
            "s",
            format!("echo x >> {}; sleep 30", c.display()),
            Some(60.0),
        );
        rt.run_in_session(&Action::Bash(action)).await.map(|_| ())
    })
    .await;
    assert_eq!(lines(&counter), 1, "the command ran exactly once");
    // execute.
    let c = counter.clone();
    killed_during(Duration::from_millis(1000), move |rt| async move {
        rt.execute(&Command::shell(
            format!("echo y >> {}; sleep 30", c.display()),
            Some(60.0),
        ))
        .await
        .map(|_| ())
    })
    .await;
    assert_eq!(lines(&counter), 2);
    // upload: a large body still streaming when the server dies.
    let target = dir.path().join("up");
    let request = UploadRequest {
        data: vec![7u8; 512 << 20],
        target_path: target.display().to_string(),
        unzip: false,
    };
    killed_during(Duration::from_millis(150), move |rt| async move {
        rt.upload(request).await
    })
    .await;
    assert!(!target.exists());
}

/// In the helper process: start a host deployment, print its server's pid, wait to be killed.
async fn helper() {
    let d = HostDeployment::new(HostConfig {
        server_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))),
        ..HostConfig::default()
    });
    d.start().await.unwrap();
    let info = d.info().await.unwrap();
    println!("{}", info.pid);
    tokio::time::sleep(Duration::from_secs(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_owner_takes_its_host_server_along() {
    if std::env::var(HELPER_ENV).is_ok() {
        return helper().await;
    }
    let exe = std::env::current_exe().unwrap();
    let mut owner = std::process::Command::new(exe)
        .args([
            "--exact",
            "a_sigkilled_owner_takes_its_host_server_along",
            "--nocapture",
        ])
        .env(HELPER_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(owner.stdout.take().unwrap());
    let mut server_pid = None;
    for _ in 0..50 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Ok(pid) = line.trim().parse::<u32>() {
            server_pid = Some(pid);
            break;
        }
    }
    let server_pid = server_pid.expect("the helper printed its server's pid");
    assert!(alive(server_pid));
    kill(Pid::from_raw(owner.id() as i32), Signal::SIGKILL).unwrap();
    let _ = owner.wait();
    assert!(
        gone_within(server_pid, Duration::from_secs(10)).await,
        "the server outlived its SIGKILLed owner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_sweeps_processes_of_dead_owners() {
    // A leftover: marked with an instance id and an owner that no longer exists.
    let mut orphan = std::process::Command::new("sleep")
        .arg("300")
        .env(INSTANCE_ENV, "fault-kill-orphan")
        .env(OWNER_ENV, "999999999:1")
        .spawn()
        .unwrap();
    // A live one: owned by this test process.
    let me = std::process::id();
    let start: u64 = std::fs::read_to_string(format!("/proc/{me}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let mut owned = std::process::Command::new("sleep")
        .arg("300")
        .env(INSTANCE_ENV, "fault-kill-owned")
        .env(OWNER_ENV, format!("{me}:{start}"))
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(sweep_orphaned_instances() >= 1);
    let _ = orphan.wait();
    assert!(
        owned.try_wait().unwrap().is_none(),
        "a live owner's process was killed"
    );
    owned.kill().unwrap();
    let _ = owned.wait();
}
