//! `/execute`, `/read_file`, `/write_file` and `/upload` over real HTTP.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server_common;

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde_json::json;
use server_common::{class_path, file_form, message, pid_alive, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_process_with_its_own_output_does_not_hold_the_answer() {
    // A daemon started with its output elsewhere (as a task's `solve.sh` starts a worker) must
    // not keep the command's output open: the answer comes when the shell exits, not at the
    // timeout. Both output modes.
    let s = TestServer::start().await;
    // The pid file goes to a temporary folder, not the server's working directory (the
    // crate's folder under `cargo test`).
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("bg.pid");
    let pid_file = pid_file.display();
    for merged in [true, false] {
        let start =
            format!("sleep 60 > /dev/null 2>&1 < /dev/null & echo $! > '{pid_file}'; echo started");
        let (status, body) = s
            .post(
                "/execute",
                json!({"command": start, "shell": true, "timeout": 30, "merge_output_streams": merged}),
            )
            .await;
        assert_eq!(status, 200, "merged={merged}: {body}");
        assert_eq!(body["exit_code"], 0, "merged={merged}: {body}");
        assert_eq!(body["stdout"], "started\n", "merged={merged}: {body}");
        let _ = s
            .post(
                "/execute",
                json!({"command": format!("kill $(cat '{pid_file}')"), "shell": true}),
            )
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_matches_subprocess_run() {
    let s = TestServer::start().await;
    let ex = |body: serde_json::Value| s.post("/execute", body);
    assert_eq!(
        ex(json!({"command": "echo hi", "shell": true})).await,
        (200, json!({"stdout": "hi\n", "stderr": "", "exit_code": 0}))
    );
    assert_eq!(
        ex(json!({"command": ["sh", "-c", "echo out; echo err 1>&2"], "merge_output_streams": true})).await,
        (200, json!({"stdout": "out\nerr\n", "stderr": "", "exit_code": 0}))
    );
    assert_eq!(
        ex(json!({"command": ["sh", "-c", "exit 3"]})).await.1["exit_code"],
        3
    );
    assert_eq!(
        ex(json!({"command": ["sh", "-c", "kill -9 $$"]})).await.1["exit_code"],
        -9
    );
    let (st, b) = ex(json!({"command": ["no-such-binary-xyz"]})).await;
    assert_eq!(
        (st, class_path(&b), message(&b)),
        (
            511,
            "builtins.FileNotFoundError",
            "[Errno 2] No such file or directory: 'no-such-binary-xyz'"
        )
    );
    let (st, b) = ex(json!({"command": "echo hi"})).await;
    assert_eq!(
        (st, message(&b)),
        (511, "[Errno 2] No such file or directory: 'echo hi'")
    );
    // env replaces the environment; no PATH means Python's default search path.
    assert_eq!(
        ex(json!({"command": ["/usr/bin/env"], "env": {"FOO": "bar"}}))
            .await
            .1["stdout"],
        "FOO=bar\n"
    );
    assert_eq!(
        ex(json!({"command": ["env"], "env": {"A": "1"}})).await.1["stdout"],
        "A=1\n"
    );
    assert_eq!(
        ex(json!({"command": "pwd", "shell": true, "cwd": "/tmp"}))
            .await
            .1["stdout"],
        "/tmp\n"
    );
    let (st, b) = ex(json!({"command": "pwd", "shell": true, "cwd": "/no/such/dir"})).await;
    assert_eq!((st, class_path(&b)), (511, "builtins.FileNotFoundError"));
    // stdin is /dev/null: a reader gets EOF at once.
    assert_eq!(
        ex(json!({"command": "cat; echo done", "shell": true, "timeout": 5}))
            .await
            .1["stdout"],
        "done\n"
    );
    // Output is decoded with backslashreplace.
    assert_eq!(
        ex(json!({"command": "printf 'a\\377'", "shell": true}))
            .await
            .1["stdout"],
        "a\\xff"
    );
    let (st, b) =
        ex(json!({"command": ["sh", "-c", "echo o; exit 2"], "check": true, "error_msg": "boom"}))
            .await;
    assert_eq!(st, 511);
    assert_eq!(message(&b), "boom: Command ['sh', '-c', 'echo o; exit 2'] failed with exit code 2. Stdout:\n'o\\n'\nStderr:\n''");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_timeout_kills_the_process_group() {
    let s = TestServer::start().await;
    let pidfile = s.scratch.path().join("pid");
    let started = Instant::now();
    let (st, b) = s
        .post("/execute", json!({"command": format!("sleep 300 & echo $! > {}; wait", pidfile.display()), "shell": true, "timeout": 0.5}))
        .await;
    assert_eq!(
        (st, class_path(&b), message(&b)),
        (
            511,
            "swerex.exceptions.CommandTimeoutError",
            "Timeout (0.5s) exceeded while running command"
        )
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !pid_alive(grandchild),
        "grandchild {grandchild} survived the timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_read_write_and_errors() {
    let s = TestServer::start().await;
    let dir = s.scratch.path().join("deep/er");
    let path = dir.join("f.txt").to_string_lossy().into_owned();
    assert_eq!(
        s.post(
            "/write_file",
            json!({"content": "héllo\nworld\n", "path": path})
        )
        .await,
        (200, json!({}))
    );
    assert_eq!(
        s.post("/read_file", json!({"path": path})).await,
        (200, json!({"content": "héllo\nworld\n"}))
    );
    std::fs::write(&path, b"a\r\nb\rc").unwrap();
    assert_eq!(
        s.post("/read_file", json!({"path": path})).await.1["content"],
        "a\nb\nc"
    );
    std::fs::write(&path, b"ok\xff\xfe\n").unwrap();
    let (st, b) = s.post("/read_file", json!({"path": path})).await;
    assert_eq!((st, class_path(&b)), (511, "builtins.UnicodeDecodeError"));
    assert_eq!(
        s.post(
            "/read_file",
            json!({"path": path, "errors": "backslashreplace"})
        )
        .await
        .1["content"],
        "ok\\xff\\xfe\n"
    );
    let (st, b) = s.post("/read_file", json!({"path": "/no/such/file"})).await;
    assert_eq!(
        (st, class_path(&b), message(&b)),
        (
            511,
            "builtins.FileNotFoundError",
            "[Errno 2] No such file or directory: '/no/such/file'"
        )
    );
    let (st, b) = s
        .post("/read_file", json!({"path": dir.to_string_lossy()}))
        .await;
    assert_eq!((st, class_path(&b)), (511, "builtins.IsADirectoryError"));
}

fn zip_bytes(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut w = zip::ZipWriter::new(&mut out);
        for (name, data) in files {
            w.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap();
    }
    out.into_inner()
}

async fn upload(
    s: &TestServer,
    data: Vec<u8>,
    target: &str,
    unzip: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut form = file_form(data, "zipped_transfer.zip").text("target_path", target.to_owned());
    if let Some(u) = unzip {
        form = form.text("unzip", u.to_owned());
    }
    let r = s.upload_form(form).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_files_and_zips() {
    let s = TestServer::start().await;
    let root = s.scratch.path().join("up");
    let binary: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let target = root.join("a/bin.dat");
    assert_eq!(
        upload(&s, binary.clone(), &target.to_string_lossy(), None).await,
        (200, json!({}))
    );
    assert_eq!(std::fs::read(&target).unwrap(), binary);
    // Into an existing directory: the standard move quirk.
    assert_eq!(
        upload(
            &s,
            b"x".to_vec(),
            &root.join("a").to_string_lossy(),
            Some("false")
        )
        .await
        .0,
        200
    );
    assert_eq!(
        std::fs::read(root.join("a/temp_file_transfer")).unwrap(),
        b"x"
    );
    let zipped = zip_bytes(&[("a.txt", b"A"), ("nested/b.txt", b"\x00\xffB")]);
    let dest = root.join("tree");
    assert_eq!(
        upload(&s, zipped, &dest.to_string_lossy(), Some("true")).await,
        (200, json!({}))
    );
    assert_eq!(std::fs::read(dest.join("a.txt")).unwrap(), b"A");
    assert_eq!(
        std::fs::read(dest.join("nested/b.txt")).unwrap(),
        b"\x00\xffB"
    );
    let (st, b) = upload(
        &s,
        b"not a zip".to_vec(),
        &root.join("z").to_string_lossy(),
        Some("1"),
    )
    .await;
    assert_eq!((st, class_path(&b)), (511, "zipfile.BadZipFile"));
    let r = s.upload_form(file_form(b"x".to_vec(), "f")).await;
    assert_eq!(r.status().as_u16(), 422);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["detail"][0]["loc"],
        json!(["body", "target_path"])
    );
    let (st, b) = upload(
        &s,
        b"x".to_vec(),
        &root.join("q").to_string_lossy(),
        Some("maybe"),
    )
    .await;
    assert_eq!(
        (st, b["detail"][0]["type"].clone()),
        (422, json!("bool_parsing"))
    );
}
