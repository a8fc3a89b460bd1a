//! Fault injection, extreme numbers: every timeout and count field of the protocol gets huge,
//! negative, infinite, NaN and overflowing values. Each request must get an HTTP answer (never a
//! dropped connection from a panicking handler) within a bounded time, and the server keeps
//! serving.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server_common;

use std::time::Duration;

use serde_json::{json, Value};
use server_common::{TestServer, TOKEN};

/// Posts and returns the status; a transport error (the handler panicked) fails the test.
async fn status_of(s: &TestServer, path: &str, body: &Value) -> u16 {
    let r = s
        .client
        .post(format!("{}{path}", s.url))
        .header("X-API-Key", TOKEN)
        .timeout(Duration::from_secs(30))
        .json(body)
        .send()
        .await;
    match r {
        Ok(r) => r.status().as_u16(),
        Err(e) => panic!("{path} {body}: no answer: {e}"),
    }
}

const EXTREMES: &[&str] = &[
    "1e19",
    "1e300",
    "-1",
    "-1e300",
    "0",
    "\"inf\"",
    "\"-inf\"",
    "\"nan\"",
    "18446744073709551616",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_timeouts_and_counts_get_answers() {
    let s = TestServer::start().await;
    s.create("main").await;
    for (i, x) in EXTREMES.iter().enumerate() {
        let n: Value = serde_json::from_str(x).unwrap();
        let name = format!("s{i}");
        let st = status_of(
            &s,
            "/create_session",
            &json!({"session_type": "bash", "session": name, "startup_timeout": n}),
        )
        .await;
        assert!(matches!(st, 200 | 511 | 422), "startup_timeout {x}: {st}");
        // A quick command never waits for its (huge) timeout.
        let st = status_of(
            &s,
            "/run_in_session",
            &json!({"action_type": "bash", "session": "main", "command": "true", "timeout": n}),
        )
        .await;
        assert!(matches!(st, 200 | 511 | 422), "run timeout {x}: {st}");
        let st = status_of(
            &s,
            "/execute",
            &json!({"command": "true", "shell": true, "timeout": n}),
        )
        .await;
        assert!(matches!(st, 200 | 511 | 422), "execute timeout {x}: {st}");
        for retry in ["4294967295", "-5", "1e300", x] {
            let r: Value = serde_json::from_str(retry).unwrap();
            // Small timeouts only: an idle session answers at once whatever n_retry says.
            let timeout = if i < 3 { json!(0.05) } else { n.clone() };
            let st = status_of(
                &s,
                "/run_in_session",
                &json!({"action_type": "bash_interrupt", "session": "main", "timeout": timeout, "n_retry": r}),
            )
            .await;
            assert!(
                matches!(st, 200 | 511 | 422),
                "interrupt n_retry {retry} timeout {timeout}: {st}"
            );
        }
    }
    // The session still works.
    assert_eq!(s.ok("main", "echo ok").await.0, "ok\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_interrupt_with_huge_numbers_is_bounded() {
    let s = TestServer::start().await;
    s.create("a").await;
    // A command that ignores SIGINT keeps the session busy; the interrupt must still end.
    let run = {
        let url = s.url.clone();
        let client = s.client.clone();
        tokio::spawn(async move {
            client
                .post(format!("{url}/run_in_session"))
                .header("X-API-Key", TOKEN)
                .json(&json!({"action_type": "bash", "session": "a", "command": "trap '' INT; sleep 30", "timeout": 1e19}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let st = status_of(
        &s,
        "/run_in_session",
        &json!({"action_type": "bash_interrupt", "session": "a", "timeout": 0.05, "n_retry": 4294967295u64}),
    )
    .await;
    assert!(matches!(st, 200 | 511), "{st}");
    let first = tokio::time::timeout(Duration::from_secs(20), run).await;
    assert!(first.is_ok(), "the running command never returned");
    assert_eq!(s.ok("a", "echo back").await.0, "back\n");
}
