//! Fault injection, limits and hostile requests: oversized bodies, special files, too many
//! sessions, slow headers, cross-site requests, secrets in `Debug` output and on command lines,
//! the scratch directory's ownership.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server_common;

use std::time::Duration;

use serde_json::{json, Value};
use server_common::{class_path, file_form, message, TestServer, TOKEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn raw(s: &TestServer, request: String) -> String {
    let address = s.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_get_413_and_errors_do_not_echo_them() {
    let s = TestServer::start_with(|c| {
        c.limits.max_body_bytes = 1 << 20;
        c.limits.max_upload_bytes = 1 << 20;
    })
    .await;
    let big = "x".repeat(2 << 20);
    let (st, body) = s
        .post("/write_file", json!({"path": "/tmp/x", "content": big}))
        .await;
    assert_eq!(
        (st, body),
        (413, json!({"detail": "Request body too large"}))
    );
    let form = file_form(vec![0u8; 2 << 20], "f").text("target_path", "/tmp/never");
    let r = s.upload_form(form).await;
    assert_eq!(r.status().as_u16(), 413);
    // An 800 KB body that fails validation: the 422 does not send it back.
    let (st, body) = s
        .post(
            "/execute",
            json!({"command": 5, "blob": "y".repeat(400_000), "cwd": "z".repeat(400_000)}),
        )
        .await;
    assert_eq!(st, 422);
    assert!(
        body.to_string().len() < 40_000,
        "{}",
        body.to_string().len()
    );
    // Long commands are shortened in exception messages.
    s.create("a").await;
    let long = format!("echo {}; (exit 3)", "w".repeat(500_000));
    let (st, body) = s
        .post(
            "/run_in_session",
            json!({"action_type": "bash", "session": "a", "command": long, "check": "raise"}),
        )
        .await;
    assert_eq!(
        (st, class_path(&body)),
        (511, "swerex.exceptions.NonZeroExitCodeError")
    );
    assert!(
        message(&body).len() < 20_000 + 500_000,
        "output is capped separately"
    );
    assert!(message(&body).contains("bytes omitted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_refuses_special_and_huge_files() {
    let s = TestServer::start_with(|c| c.limits.max_read_bytes = 1000).await;
    let fifo = s.scratch.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let big = s.scratch.path().join("big");
    std::fs::write(&big, vec![b'a'; 1001]).unwrap();
    for path in ["/dev/zero", fifo.to_str().unwrap(), big.to_str().unwrap()] {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            s.post("/read_file", json!({"path": path})),
        )
        .await
        .expect("read_file must not block");
        assert_eq!(
            (r.0, class_path(&r.1)),
            (511, "builtins.OSError"),
            "{path}: {}",
            r.1
        );
    }
    let small = s.scratch.path().join("small");
    std::fs::write(&small, "ok").unwrap();
    assert_eq!(
        s.post("/read_file", json!({"path": small})).await,
        (200, json!({"content": "ok"}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_limited() {
    let s = TestServer::start_with(|c| c.limits.max_sessions = 2).await;
    s.create("a").await;
    s.create("b").await;
    let (st, body) = s
        .post(
            "/create_session",
            json!({"session_type": "bash", "session": "c"}),
        )
        .await;
    assert_eq!(
        (st, class_path(&body)),
        (511, "builtins.RuntimeError"),
        "{body}"
    );
    s.post(
        "/close_session",
        json!({"session_type": "bash", "session": "a"}),
    )
    .await;
    s.create("c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_children_are_limited() {
    let s = TestServer::start_with(|c| c.limits.max_executes = 1).await;
    let log = s.scratch.path().join("log");
    let body = json!({"command": format!("echo start >> {0}; sleep 0.2; echo end >> {0}", log.display()), "shell": true});
    let answers = futures::future::join_all((0..3).map(|_| s.post("/execute", body.clone()))).await;
    assert!(answers.iter().all(|a| a.0 == 200), "{answers:?}");
    // One child at a time: the runs never interleave.
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "start\nend\n".repeat(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off_and_connections_are_limited() {
    let s = TestServer::start_with(|c| {
        c.limits.header_timeout = Duration::from_millis(300);
        c.limits.max_connections = 2;
    })
    .await;
    let address = s.url.trim_start_matches("http://").to_owned();
    // Two idle connections that never finish their headers hold both slots...
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut c = tokio::net::TcpStream::connect(&address).await.unwrap();
        c.write_all(b"GET /is_alive HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        idle.push(c);
    }
    // ...until the header timeout closes them; then the server answers again.
    for c in &mut idle {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut buf)).await;
        assert!(
            read.is_ok(),
            "a connection with unfinished headers stayed open"
        );
    }
    assert_eq!(s.get("/is_alive").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_requests_are_refused() {
    let s = TestServer::start().await;
    let counter = s.scratch.path().join("ran");
    let body =
        json!({"command": format!("touch {}", counter.display()), "shell": true}).to_string();
    // A browser's "simple" request: text/plain, foreign Origin.
    let answer = raw(
        &s,
        format!(
            "POST /execute HTTP/1.1\r\nHost: {}\r\nX-API-Key: {TOKEN}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            s.url.trim_start_matches("http://"),
            body.len()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 415"), "{answer}");
    let answer = raw(
        &s,
        format!(
            "POST /execute HTTP/1.1\r\nHost: {}\r\nOrigin: http://evil.example\r\nX-API-Key: {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            s.url.trim_start_matches("http://"),
            body.len()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(!counter.exists());

    // Without authentication, a DNS-rebound Host is refused too.
    let open = TestServer::start_with(|c| {
        c.auth_token = String::new();
        c.insecure_no_auth = true;
    })
    .await;
    let answer = raw(
        &open,
        format!(
            "POST /execute HTTP/1.1\r\nHost: attacker.example:80\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(!counter.exists());
    // An empty token without the explicit opt-out is refused at start.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = uniagent_sandboxes::server::serve(
        listener,
        uniagent_sandboxes::server::ServerConfig::new(""),
        std::future::pending(),
    )
    .await;
    assert!(refused.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scratch_directory_must_be_private() {
    let base = tempfile::tempdir().unwrap();
    let shared = base.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mut config = uniagent_sandboxes::server::ServerConfig::new("t");
    config.shell.scratch_dir = shared.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = uniagent_sandboxes::server::serve(listener, config, std::future::pending()).await;
    assert!(
        refused.is_err(),
        "a world-writable scratch dir was accepted"
    );
    let link = base.path().join("link");
    std::os::unix::fs::symlink(base.path(), &link).unwrap();
    assert!(uniagent_sandboxes::server::prepare_scratch_dir(&link).is_err());
    // The default is a fresh 0700 directory per server.
    let a = uniagent_sandboxes::server::prepare_scratch_dir(std::path::Path::new("")).unwrap();
    let b = uniagent_sandboxes::server::prepare_scratch_dir(std::path::Path::new("")).unwrap();
    assert_ne!(a, b);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&a).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
    let _ = std::fs::remove_dir(a);
    let _ = std::fs::remove_dir(b);
}

#[test]
fn secrets_stay_out_of_debug_output() {
    let config = uniagent_sandboxes::RemoteConfig {
        url: "http://127.0.0.1:1".into(),
        auth_token: Some("s3cret-token-value".into()),
        ..uniagent_sandboxes::RemoteConfig::default()
    };
    assert!(!format!("{config:?}").contains("s3cret"));
    let deployment = uniagent_sandboxes::RemoteDeployment::new(config).unwrap();
    assert!(!format!("{deployment:?}").contains("s3cret"));
    let t1 = uniagent_sandboxes::secret::random_hex(16).unwrap();
    let t2 = uniagent_sandboxes::secret::random_hex(16).unwrap();
    assert!(t1.len() == 32 && t1 != t2);
    let _: Value = json!(null);
}
