//! `HostDeployment` leaves nothing behind: stop, drop, a cancelled start and a panicking task all
//! end the server, its sessions and the background processes they started (including ones that
//! left the process group with `setsid`), and startup failures are reported with the server's
//! own output.

#![cfg(all(feature = "host", feature = "server"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure

use std::path::{Path, PathBuf};
use std::time::Duration;

use uniagent_core::sandbox::{Command, CreateSessionRequest};
use uniagent_core::{Deployment, DeploymentExt, ErrorKind};
use uniagent_sandboxes::host::{marked_processes, HostInfo, INSTANCE_ENV};
use uniagent_sandboxes::{HostConfig, HostDeployment};

fn real_server() -> HostConfig {
    HostConfig {
        server_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_uniagent-sandbox"))),
        ..HostConfig::default()
    }
}

/// Alive and not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

/// Waits up to 5 s for every pid to be gone.
async fn all_gone(pids: &[u32]) -> bool {
    for _ in 0..100 {
        if pids.iter().all(|&p| !alive(p)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Starts the real server and three kinds of descendants: a session shell's background job, a
/// `setsid` daemon started through `execute`, and the session shell itself. Returns all pids.
async fn start_with_descendants(d: &HostDeployment) -> (HostInfo, Vec<u32>) {
    d.start().await.unwrap();
    let info = d.info().await.unwrap();
    d.create_session(CreateSessionRequest::new("s"))
        .await
        .unwrap();
    let job = d
        .bash("s", "sleep 1001 & echo $!", Duration::from_secs(10))
        .await
        .unwrap();
    let shell = d
        .bash("s", "echo $$", Duration::from_secs(10))
        .await
        .unwrap();
    let daemon = d
        .execute(Command::shell(
            "setsid sleep 1002 >/dev/null 2>&1 < /dev/null & echo $!",
            Some(10.0),
        ))
        .await
        .unwrap();
    let mut pids = vec![info.pid];
    for text in [&job.output, &shell.output, &daemon.stdout] {
        pids.push(
            text.trim()
                .rsplit('\n')
                .next()
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        );
    }
    assert!(pids.iter().all(|&p| alive(p)), "not all started: {pids:?}");
    // A child caught inside `execve` shows an empty environment for a moment: poll.
    let needle = format!("{INSTANCE_ENV}={}", info.instance_id);
    let mut marked = 0;
    for _ in 0..100 {
        marked = marked_processes(&needle).len();
        if marked >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(marked >= 4, "only {marked} marked processes");
    (info, pids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_every_process_and_removes_the_work_dir() {
    let d = HostDeployment::new(real_server());
    let (info, pids) = start_with_descendants(&d).await;
    assert!(info.work_dir.is_dir());
    d.stop().await.unwrap();
    assert!(all_gone(&pids).await, "survivors among {pids:?}");
    assert!(marked_processes(&format!("{INSTANCE_ENV}={}", info.instance_id)).is_empty());
    assert!(!info.work_dir.exists(), "work dir left behind");
    d.stop().await.unwrap();
    let err = d.sh("echo hi", Duration::from_secs(5)).await.unwrap_err();
    assert!(err.to_string().contains("stopped"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_deployment_ends_every_process() {
    let d = HostDeployment::new(real_server());
    let (info, pids) = start_with_descendants(&d).await;
    drop(d);
    assert!(all_gone(&pids).await, "survivors among {pids:?}");
    assert!(!info.work_dir.exists(), "work dir left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_task_leaks_nothing() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let d = HostDeployment::new(real_server());
        let started = start_with_descendants(&d).await;
        tx.send(started).unwrap();
        panic!("rollout bug");
    });
    assert!(task.await.unwrap_err().is_panic());
    let (_, pids) = rx.await.unwrap();
    assert!(all_gone(&pids).await, "survivors among {pids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_work_dir_keeps_it() {
    let root = tempfile::tempdir().unwrap();
    let config = HostConfig {
        keep_work_dir: true,
        work_root: Some(root.path().into()),
        ..real_server()
    };
    let d = HostDeployment::new(config);
    d.start().await.unwrap();
    d.write_text("marker.txt", "kept").await.unwrap();
    let info = d.info().await.unwrap();
    assert!(info.work_dir.starts_with(root.path()));
    d.stop().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(info.work_dir.join("marker.txt")).unwrap(),
        "kept"
    );
}

/// A fake server: records its pid and a background child's pid in `$PIDS`, then either never
/// answers or fails.
fn fake_server(dir: &Path, body: &str) -> HostConfig {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("fake-server");
    let pids = dir.join("pids");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho $$ >> {p}\nsleep 1003 &\necho $! >> {p}\n{body}\n",
            p = pids.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    HostConfig {
        server_binary: Some(script),
        startup_timeout: Duration::from_secs(30),
        ..HostConfig::default()
    }
}

fn recorded_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_start_kills_what_it_spawned() {
    let dir = tempfile::tempdir().unwrap();
    let d = HostDeployment::new(fake_server(dir.path(), "exec sleep 1004"));
    let outcome = tokio::time::timeout(Duration::from_millis(700), d.start()).await;
    assert!(outcome.is_err(), "the fake server can never become alive");
    let pids = recorded_pids(dir.path());
    assert_eq!(pids.len(), 2, "the fake server did not run: {pids:?}");
    assert!(all_gone(&pids).await, "survivors among {pids:?}");
    let err = d.sh("echo hi", Duration::from_secs(5)).await.unwrap_err();
    assert!(err.to_string().contains("not started"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_failures_name_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let d = HostDeployment::new(fake_server(
        dir.path(),
        "echo boom: cannot bind >&2; exit 3",
    ));
    let err = d.start().await.unwrap_err();
    assert!(err.to_string().contains("boom: cannot bind"), "{err}");
    assert!(all_gone(&recorded_pids(dir.path())).await);

    let dir = tempfile::tempdir().unwrap();
    let config = HostConfig {
        startup_timeout: Duration::from_millis(300),
        ..fake_server(dir.path(), "exec sleep 1005")
    };
    let err = HostDeployment::new(config).start().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(all_gone(&recorded_pids(dir.path())).await);

    let missing = HostConfig {
        server_binary: Some("/no/such/uniagent-sandbox".into()),
        ..HostConfig::default()
    };
    let err = HostDeployment::new(missing).start().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
}
