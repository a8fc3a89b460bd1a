//! `RemoteRuntime` on the wire, against scripted raw-TCP peers: what it sends (SWE-ReX's full
//! bodies, `X-API-Key`, `X-Request-ID`), which failures it retries (connection failures only,
//! with the same idempotency key; a connection lost after a non-idempotent request went out is
//! not retried, unless it was a pooled connection the server had closed) and which it does not (deadlines, 511, HTTP errors), and that a request's
//! deadline outlasts the command timeout it carries.

#![cfg(feature = "client")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uniagent_core::sandbox::{Action, BashAction, Command, ExceptionClass};
use uniagent_core::{Error, ErrorKind, RetryConfig};
use uniagent_sandboxes::client::{RemoteRuntime, RemoteRuntimeOptions};

/// One request as the peer saw it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// What the peer does with the n-th connection.
#[derive(Clone, Copy)]
enum Reply {
    /// Read the request, then close without answering.
    Hangup,
    /// Answer the first request and keep the connection open; read the next one and close
    /// without answering, as uvicorn closes a connection after an answer whose handler raised.
    /// With `then_exit`, the peer then stops listening, as a server that died would.
    AnswerThenHangup { body: &'static str, then_exit: bool },
    /// Answer after a delay.
    Answer {
        delay_ms: u64,
        status: u16,
        body: &'static str,
    },
}

async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let seen = Seen {
                head,
                body: Vec::new(),
            };
            let len: usize = seen
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(Seen {
                body: buf[end + 4..end + 4 + len].to_vec(),
                ..seen
            });
        }
    }
}

/// A peer that handles connection `i` with `replies[min(i, last)]` and records every request.
async fn peer(replies: Vec<Reply>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        for i in 0.. {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let reply = replies[i.min(replies.len() - 1)];
            let handled = tokio::spawn(serve(stream, reply, log.clone()));
            if let Reply::AnswerThenHangup {
                then_exit: true, ..
            } = reply
            {
                let _ = handled.await;
                return;
            }
        }
    });
    (url, seen)
}

/// Handles one connection of [`peer`].
async fn serve(mut stream: TcpStream, reply: Reply, log: Arc<Mutex<Vec<Seen>>>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    log.lock().unwrap().push(request);
    match reply {
        Reply::Hangup => drop(stream),
        Reply::AnswerThenHangup { body, .. } => {
            let text = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(text.as_bytes()).await;
            if let Some(next) = read_request(&mut stream).await {
                log.lock().unwrap().push(next);
            }
        }
        Reply::Answer {
            delay_ms,
            status,
            body,
        } => {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let text = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(text.as_bytes()).await;
        }
    }
}

fn client(url: &str, margin_ms: u64) -> RemoteRuntime {
    let options = RemoteRuntimeOptions {
        timeout_margin: Duration::from_millis(margin_ms),
        retry: RetryConfig {
            initial_backoff: Duration::from_millis(5),
            max_attempts: 4,
            ..RetryConfig::default()
        },
        ..RemoteRuntimeOptions::default()
    };
    RemoteRuntime::new(url, Some("secret".into()), options).unwrap()
}

const OBSERVATION: &str = r#"{"output":"hi\n","exit_code":0,"failure_reason":"","expect_string":"SHELLPS1PREFIX","session_type":"bash"}"#;

#[tokio::test]
async fn sends_swerex_shaped_bodies_with_auth_and_request_id() {
    let (url, seen) = peer(vec![Reply::Answer {
        delay_ms: 0,
        status: 200,
        body: OBSERVATION,
    }])
    .await;
    let obs = client(&url, 1000)
        .run_in_session(&Action::Bash(BashAction::new("s", "echo hi", Some(5.0))))
        .await
        .unwrap();
    assert_eq!(obs.output, "hi\n");
    let seen = seen.lock().unwrap()[0].clone();
    assert!(
        seen.head.starts_with("POST /run_in_session HTTP/1.1"),
        "{}",
        seen.head
    );
    assert_eq!(seen.header("x-api-key").as_deref(), Some("secret"));
    assert_eq!(seen.header("x-request-id").map(|id| id.len()), Some(36));
    let body: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(
        body,
        json!({"command": "echo hi", "session": "s", "timeout": 5.0, "check": "silent", "error_msg": "",
               "is_interactive_command": false, "is_interactive_quit": false, "expect": [], "action_type": "bash"})
    );
}

#[tokio::test]
async fn connection_failures_are_retried_with_the_same_request_id() {
    let (url, seen) = peer(vec![
        Reply::Hangup,
        Reply::Hangup,
        Reply::Answer {
            delay_ms: 0,
            status: 200,
            body: r#"{"content":"hi\n"}"#,
        },
    ])
    .await;
    let out = client(&url, 1000)
        .read_file(&uniagent_core::sandbox::ReadFileRequest::new("/x"))
        .await
        .unwrap();
    assert_eq!(out.content, "hi\n");
    let ids: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.header("x-request-id").unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(
        ids.iter().all(|id| id == &ids[0]),
        "one logical request, one key: {ids:?}"
    );
}

#[tokio::test]
async fn close_is_resent_after_the_connection_broke() {
    // Closing every session twice closes nothing the second time: a `/close` whose answer was
    // lost (a keep-alive connection the server dropped) is sent again.
    let (url, seen) = peer(vec![
        Reply::Hangup,
        Reply::Answer {
            delay_ms: 0,
            status: 200,
            body: "{}",
        },
    ])
    .await;
    client(&url, 1000).close().await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_command_is_not_resent_after_the_connection_broke() {
    // The request went out, then the connection closed: the server may have run the command
    // (and, restarted, would not know the request id), so it is not sent again.
    let (url, seen) = peer(vec![Reply::Hangup]).await;
    let err = client(&url, 1000)
        .execute(&Command::shell("echo hi", Some(5.0)))
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Refused connections never reached a server: retried.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let err = client(&format!("http://127.0.0.1:{port}"), 1000)
        .execute(&Command::shell("echo hi", Some(5.0)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::RetriesExhausted { attempts: 4, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_command_on_a_pooled_connection_the_server_closed_is_resent() {
    // The second command goes out on the kept-alive connection, which the peer closes without
    // answering: no connection was opened for it, so it is the idle-close race, resent under
    // the same request id on a new connection.
    const ANSWER: &str = r#"{"stdout":"hi\n","stderr":"","exit_code":0}"#;
    let (url, seen) = peer(vec![
        Reply::AnswerThenHangup {
            body: ANSWER,
            then_exit: false,
        },
        Reply::Answer {
            delay_ms: 0,
            status: 200,
            body: ANSWER,
        },
    ])
    .await;
    let client = client(&url, 1000);
    let command = Command::shell("echo hi", Some(5.0));
    assert_eq!(client.execute(&command).await.unwrap().stdout, "hi\n");
    assert_eq!(client.execute(&command).await.unwrap().stdout, "hi\n");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let ids: Vec<_> = seen.iter().map(|s| s.header("x-request-id")).collect();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(ids[1], ids[2]);
}

#[tokio::test]
async fn a_command_on_a_closed_pooled_connection_of_a_dead_server_is_not_retried() {
    // The same, but the server is gone: the resend is refused, and the command (which a dying
    // server may have started) is not sent again later, when a restarted one could run it twice.
    const ANSWER: &str = r#"{"stdout":"hi\n","stderr":"","exit_code":0}"#;
    let (url, seen) = peer(vec![Reply::AnswerThenHangup {
        body: ANSWER,
        then_exit: true,
    }])
    .await;
    let client = client(&url, 1000);
    let command = Command::shell("echo hi", Some(5.0));
    client.execute(&command).await.unwrap();
    let err = client.execute(&command).await.unwrap_err();
    assert!(
        matches!(&err, Error::Sandbox { retryable: false, message, .. } if message.contains("connection failed during POST /execute")),
        "{err:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn exhausted_retries_keep_the_connection_error() {
    let (url, seen) = peer(vec![Reply::Hangup]).await;
    let err = client(&url, 1000)
        .read_file(&uniagent_core::sandbox::ReadFileRequest::new("/x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::RetriesExhausted { attempts: 4, .. }),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(seen.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn exceptions_and_http_errors_are_not_retried() {
    let exception = r#"{"swerexception":{"message":"timeout after 1.0 seconds","class_path":"swerex.exceptions.CommandTimeoutError","traceback":"","extra_info":{}}}"#;
    let (url, seen) = peer(vec![Reply::Answer {
        delay_ms: 0,
        status: 511,
        body: exception,
    }])
    .await;
    let err = client(&url, 1000)
        .execute(&Command::shell("sleep 5", Some(1.0)))
        .await
        .unwrap_err();
    let Error::Runtime { exception, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(exception.class(), ExceptionClass::CommandTimeout);
    assert_eq!(seen.lock().unwrap().len(), 1);

    let (url, seen) = peer(vec![Reply::Answer {
        delay_ms: 0,
        status: 401,
        body: r#"{"detail":"Invalid API Key"}"#,
    }])
    .await;
    let err = client(&url, 1000)
        .execute(&Command::shell("echo", Some(1.0)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Invalid API Key"), "{err}");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_deadline_outlasts_the_command_timeout_and_is_never_retried() {
    // The server answers 300 ms after the command's own 0.5 s timeout: inside the margin.
    let body = r#"{"stdout":"late\n","stderr":"","exit_code":0}"#;
    let (url, _) = peer(vec![Reply::Answer {
        delay_ms: 800,
        status: 200,
        body,
    }])
    .await;
    let out = client(&url, 1500)
        .execute(&Command::shell("x", Some(0.5)))
        .await
        .unwrap();
    assert_eq!(out.stdout, "late\n");

    // A peer that never answers: the deadline (command timeout + margin) ends the request once.
    let (url, seen) = peer(vec![Reply::Answer {
        delay_ms: 60_000,
        status: 200,
        body,
    }])
    .await;
    let err = client(&url, 200)
        .execute(&Command::shell("x", Some(0.1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(!err.is_retryable());
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "a deadline must not be retried: the command may be running"
    );
}

#[tokio::test]
async fn is_alive_reports_an_unreachable_server_as_not_alive() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let runtime = client(&format!("http://127.0.0.1:{port}"), 100);
    let alive = runtime
        .is_alive(Some(Duration::from_millis(200)))
        .await
        .unwrap();
    assert!(!alive.is_alive && !alive.message.is_empty(), "{alive:?}");
    let err = runtime
        .wait_until_alive(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(RemoteRuntime::new("ftp://x", None, RemoteRuntimeOptions::default()).is_err());
}

#[tokio::test]
async fn extra_headers_go_with_every_request_and_stay_out_of_debug_output() {
    let (url, seen) = peer(vec![Reply::Answer {
        delay_ms: 0,
        status: 200,
        body: OBSERVATION,
    }])
    .await;
    let options = RemoteRuntimeOptions {
        extra_headers: vec![
            ("X-Sandbox-ID".into(), "sb-1".into()),
            ("Authorization".into(), "Bearer router-secret".into()),
        ],
        ..RemoteRuntimeOptions::default()
    };
    let debug = format!("{options:?}");
    assert!(
        debug.contains("X-Sandbox-ID") && !debug.contains("router-secret"),
        "{debug}"
    );
    let runtime = RemoteRuntime::new(&url, Some("secret".into()), options).unwrap();
    runtime
        .run_in_session(&Action::Bash(BashAction::new("s", "echo hi", Some(5.0))))
        .await
        .unwrap();
    let seen = seen.lock().unwrap()[0].clone();
    assert_eq!(seen.header("x-sandbox-id").as_deref(), Some("sb-1"));
    assert_eq!(
        seen.header("authorization").as_deref(),
        Some("Bearer router-secret")
    );
    assert_eq!(seen.header("x-api-key").as_deref(), Some("secret"));
    let bad = RemoteRuntimeOptions {
        extra_headers: vec![("bad header".into(), "x".into())],
        ..RemoteRuntimeOptions::default()
    };
    let err = RemoteRuntime::new(&url, None, bad).unwrap_err();
    assert!(err.to_string().contains("bad header"), "{err}");
}
