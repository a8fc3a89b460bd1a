//! Fault injection, exhausted resources: a full disk (a 1 MiB tmpfs, mounted when the tests run
//! as root; skipped with a printed reason otherwise) during `write_file`, `upload`, zip
//! extraction and command-file creation; and a (bounded) fork bomb that stays alive until the
//! timeout, in a session and through `/execute`. Every case gets a typed answer, leaves nothing
//! running, and the server keeps working.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fault_common;
mod server_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fault_common::{deflated_zip, upload};
use serde_json::{json, Value};
use server_common::{class_path, message, TestServer};

/// A size-limited tmpfs, unmounted on drop.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(bytes: usize) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("small");
        std::fs::create_dir(&path).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0700"),
                "tmpfs",
            ])
            .arg(&path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(Self { path, _dir: dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

fn no_space(body: &serde_json::Value) -> bool {
    message(body).contains("No space left on device") || message(body).contains("[Errno 28]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gives_typed_errors_everywhere() {
    let small = match Tmpfs::mount(1 << 20) {
        Ok(t) => t,
        Err(why) => {
            println!("skipped: cannot mount a size-limited tmpfs ({why})");
            return;
        }
    };
    let root: &Path = &small.path;
    let s = TestServer::start_with(|c| c.shell.scratch_dir = root.join("scratch")).await;
    s.create("a").await;
    // write_file.
    let (st, body) = s
        .post(
            "/write_file",
            json!({"path": root.join("big"), "content": "x".repeat(2 << 20)}),
        )
        .await;
    assert_eq!(st, 511, "{body}");
    assert!(no_space(&body), "{body}");
    let _ = std::fs::remove_file(root.join("big"));
    // upload (plain) and upload with unzip.
    let (st, body) = upload(
        &s,
        vec![1u8; 2 << 20],
        root.join("up").to_str().unwrap(),
        false,
    )
    .await;
    assert_eq!(st, 511, "{body}");
    let _ = std::fs::remove_file(root.join("up"));
    let zip = deflated_zip(&[("zeros".into(), vec![0u8; 2 << 20])]);
    let (st, body) = upload(&s, zip, root.join("unz").to_str().unwrap(), true).await;
    assert_eq!(st, 511, "{body}");
    assert!(no_space(&body), "{body}");
    let _ = std::fs::remove_dir_all(root.join("unz"));
    // Command files: fill the disk, then run a command in the session.
    let fill = root.join("fill");
    let (st, _) = s
        .post("/execute", json!({"command": format!("dd if=/dev/zero of={} bs=64k count=100", fill.display()), "shell": true}))
        .await;
    assert_eq!(st, 200);
    let (st, body) = s.run("a", "echo hi", Some(10.0)).await;
    assert_eq!((st, class_path(&body)), (511, "builtins.OSError"), "{body}");
    assert!(no_space(&body), "{body}");
    // Room again: the same session works.
    std::fs::remove_file(&fill).unwrap();
    assert_eq!(s.ok("a", "echo back").await.0, "back\n");
    assert_eq!(s.get("/is_alive").await.0, 200);
    drop(s);
}

/// Processes whose command line contains `needle`.
fn running(needle: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(needle)
                })
                .unwrap_or(false)
                && server_common::pid_alive(*pid as i32)
        })
        .count()
}

async fn none_left(needle: &str) -> bool {
    for _ in 0..100 {
        if running(needle) == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A bounded fork bomb: a binary tree of subshells (2^7 processes) that ignore SIGINT and
/// sleep, so only the kill path ends it.
fn bomb(marker: &str) -> String {
    format!("( trap '' INT; b() {{ if [ $1 -gt 0 ]; then b $(($1-1)) & b $(($1-1)) & fi; exec sleep {marker}; }}; b 6 )")
}

/// The bomb's command answered with a timeout and none of its processes outlived `timeout`.
async fn assert_timed_out_and_gone((st, body): (u16, Value), marker: &str, timeout: &str) {
    assert_eq!(
        (st, class_path(&body)),
        (511, "swerex.exceptions.CommandTimeoutError"),
        "{body}"
    );
    assert!(
        none_left(marker).await,
        "{} bomb processes survived {timeout}",
        running(marker)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_stopped_at_the_timeout_on_the_host() {
    let s = TestServer::start().await;
    s.create("a").await;
    let marker = "31.4159";
    let answer = s.run("a", &bomb(marker), Some(1.0)).await;
    assert_timed_out_and_gone(answer, marker, "the timeout").await;
    assert_eq!(s.ok("a", "echo alive").await.0, "alive\n");
    // The same through /execute.
    let marker = "27.1828";
    let answer = s
        .post(
            "/execute",
            json!({"command": bomb(marker), "shell": true, "timeout": 1.0}),
        )
        .await;
    assert_timed_out_and_gone(answer, marker, "/execute's timeout").await;
}
