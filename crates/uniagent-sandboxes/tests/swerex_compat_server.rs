//! SWE-ReX 1.4.0's own Python `RemoteRuntime` (from the project venv) drives our
//! `uniagent-sandbox` through the shared scenario list (`tests/swerex/drive_server.py` +
//! `scenarios.json`), and, as a control that keeps the list honest, the real `swerex-remote`.

#![cfg(all(feature = "server", feature = "client"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure
mod swerex_common;

use std::path::Path;
use std::process::Command;

use swerex_common::{our_server_binary, swerex_venv, ServerUnderTest};

/// Runs the Python driver against `server`; panics with its report unless every step matched.
fn drive_with_python_client(venv: &Path, server: &ServerUnderTest, what: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/swerex/drive_server.py");
    let out = Command::new(venv.join("bin/python"))
        .arg(&script)
        .args(["--url", &server.url, "--token", &server.token])
        .env_remove("TERM")
        .output()
        .expect("cannot run the venv's python");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{report}");
    assert!(
        out.status.success(),
        "SWE-ReX's RemoteRuntime against {what}:\n{report}"
    );
    assert!(
        report.contains("steps matched"),
        "the driver did not finish:\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swerex_python_client_drives_our_server() {
    let Some(venv) = swerex_venv() else { return };
    let server = ServerUnderTest::start(&our_server_binary(), &[]).await;
    tokio::task::block_in_place(|| drive_with_python_client(&venv, &server, "uniagent-sandbox"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swerex_python_client_drives_swerex_remote_as_a_control() {
    let Some(venv) = swerex_venv() else { return };
    let server = ServerUnderTest::start(&venv.join("bin/swerex-remote"), &[]).await;
    tokio::task::block_in_place(|| drive_with_python_client(&venv, &server, "swerex-remote"));
}
