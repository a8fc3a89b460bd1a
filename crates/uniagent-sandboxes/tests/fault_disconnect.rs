//! Fault injection, clients that go away and requests that repeat: a disconnect during
//! `create_session`, a running command or an upload leaks nothing and blocks nothing, and a
//! command runs once per `X-Request-ID` however often (and however concurrently) it is sent.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server_common;

use std::time::Duration;

use serde_json::{json, Value};
use server_common::{TestServer, TOKEN};
use tokio::io::AsyncWriteExt;

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Sends a request and drops it after `after`, as a client that disconnects.
async fn abandon(s: &TestServer, path: &str, body: Value, id: Option<&str>, after: Duration) {
    let mut request = s
        .client
        .post(format!("{}{path}", s.url))
        .header("X-API-Key", TOKEN)
        .json(&body);
    if let Some(id) = id {
        request = request.header("X-Request-ID", id);
    }
    let sent = tokio::time::timeout(after, request.send()).await;
    assert!(
        sent.is_err(),
        "the request finished before it could be abandoned"
    );
}

async fn post_id(s: &TestServer, path: &str, body: &Value, id: &str) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}{path}", s.url))
        .header("X-API-Key", TOKEN)
        .header("X-Request-ID", id)
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_during_create_session_never_sticks_the_name() {
    let s = TestServer::start().await;
    let slow = s.scratch.path().join("slow.sh");
    std::fs::write(&slow, "sleep 1\n").unwrap();
    abandon(
        &s,
        "/create_session",
        json!({"session_type": "bash", "session": "x", "startup_source": [slow.display().to_string()]}),
        None,
        Duration::from_millis(200),
    )
    .await;
    // The name becomes usable: it can be closed (once started) and created again.
    let mut closed = false;
    for _ in 0..100 {
        let (st, _) = s
            .post(
                "/close_session",
                json!({"session_type": "bash", "session": "x"}),
            )
            .await;
        if st == 200 {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed, "session name stuck after the client went away");
    s.create("x").await;
    assert_eq!(s.ok("x", "echo ok").await.0, "ok\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_disconnect_does_not_run_the_command_again() {
    let s = TestServer::start().await;
    s.create("a").await;
    let counter = s.scratch.path().join("runs");
    let command = format!("sleep 0.6; echo x >> {}; echo done", counter.display());
    let body = json!({"action_type": "bash", "session": "a", "command": command, "timeout": 20});
    abandon(
        &s,
        "/run_in_session",
        body.clone(),
        Some("r-1"),
        Duration::from_millis(150),
    )
    .await;
    // The retry with the same id waits for the first run and returns its answer.
    let (st, answer) = post_id(&s, "/run_in_session", &body, "r-1").await;
    assert_eq!(
        (st, answer["output"].as_str()),
        (200, Some("done\n")),
        "{answer}"
    );
    assert_eq!(lines(&counter), 1);
    // Once finished, repeats are served from the replay cache.
    assert_eq!(post_id(&s, "/run_in_session", &body, "r-1").await.1, answer);
    assert_eq!(lines(&counter), 1);
    // The session was not disturbed.
    assert_eq!(s.ok("a", "echo next").await.0, "next\n");

    // /execute, abandoned and retried.
    let exec =
        json!({"command": format!("sleep 0.6; echo y >> {}", counter.display()), "shell": true});
    abandon(
        &s,
        "/execute",
        exec.clone(),
        Some("e-1"),
        Duration::from_millis(150),
    )
    .await;
    assert_eq!(post_id(&s, "/execute", &exec, "e-1").await.0, 200);
    assert_eq!(lines(&counter), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_id_run_once() {
    let s = TestServer::start().await;
    let counter = s.scratch.path().join("runs");
    let exec = json!({"command": format!("echo x >> {}; sleep 0.3; date +%s%N", counter.display()), "shell": true});
    let answers =
        futures::future::join_all((0..8).map(|_| post_id(&s, "/execute", &exec, "same-id"))).await;
    assert_eq!(lines(&counter), 1, "{answers:?}");
    assert!(
        answers.iter().all(|a| a == &answers[0] && a.0 == 200),
        "{answers:?}"
    );
    // Failures (511, not stored) are shared with the concurrent repeats too.
    let fail = json!({"command": format!("echo x >> {}; sleep 0.3; exit 3", counter.display()), "shell": true, "check": true});
    let answers =
        futures::future::join_all((0..4).map(|_| post_id(&s, "/execute", &fail, "fail-id"))).await;
    assert_eq!(lines(&counter), 2, "{answers:?}");
    assert!(answers.iter().all(|a| a.0 == 511), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_mid_upload_leaves_no_staged_file() {
    let s = TestServer::start().await;
    let address = s.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /upload HTTP/1.1\r\nHost: {address}\r\nX-API-Key: {TOKEN}\r\nContent-Type: multipart/form-data; boundary=B\r\nContent-Length: 10000000\r\n\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b'z'; 1 << 20]).await.unwrap();
    stream.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    let uploads = s.scratch.path().join("scratch").join("uploads");
    let mut left = usize::MAX;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = std::fs::read_dir(&uploads).map(|d| d.count()).unwrap_or(0);
        if left == 0 {
            break;
        }
    }
    assert_eq!(left, 0, "staged upload left behind");
    assert_eq!(s.get("/is_alive").await.0, 200);
}
