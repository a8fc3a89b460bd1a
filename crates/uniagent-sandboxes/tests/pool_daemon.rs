//! A pool whose Docker daemon stops answering says so on `/healthz` and refuses leases with a
//! typed, retryable 503 (`daemon_unavailable`) within seconds instead of hanging, also a lease
//! request that was already waiting on Docker; it takes leases again once the daemon answers.
//!
//! The daemon is a fake one on a unix socket (the pool's `DOCKER_HOST`): it answers the calls
//! of a pool's startup and health probe until the test wedges it, and then accepts connections
//! and requests but never answers, like a daemon whose every call hangs. No real daemon is
//! needed or touched.

#![cfg(feature = "pool")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pool_common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool_common::deadline::{deadline, DEFAULT};
use pool_common::{unique, PoolProcess, PoolSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// A fake Docker Engine API on a unix socket, served by a thread of its own.
struct FakeDaemon {
    socket: PathBuf,
    wedged: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl FakeDaemon {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let wedged = Arc::new(AtomicBool::new(false));
        let (path, flag) = (socket.clone(), wedged.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        // Its own thread and runtime: the test blocks its own while the pool starts.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = UnixListener::bind(&path).unwrap();
                ready_tx.send(()).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(serve(stream, flag.clone()));
                }
            });
        });
        ready_rx.recv().unwrap();
        Self {
            socket,
            wedged,
            _dir: dir,
        }
    }

    fn docker_host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// From now on every request is read and never answered.
    fn wedge(&self, wedged: bool) {
        self.wedged.store(wedged, Ordering::SeqCst);
    }
}

/// Answers the requests of one connection (HTTP/1.1, kept alive) until the daemon is wedged;
/// then holds the connection without a word.
async fn serve(mut stream: UnixStream, wedged: Arc<AtomicBool>) {
    let mut buffer = Vec::new();
    loop {
        let head_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
        let body_len = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())
                    .flatten()
            })
            .unwrap_or(0);
        while buffer.len() < head_end + body_len {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        buffer.drain(..head_end + body_len);
        if wedged.load(Ordering::SeqCst) {
            // Hold the connection open, unanswered, until the client gives up on it.
            let mut sink = [0u8; 4096];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            return;
        }
        let path = head.split_whitespace().nth(1).unwrap_or("/");
        let (status, kind, body) = if path.ends_with("/version") {
            (
                "200 OK",
                "application/json",
                r#"{"ApiVersion":"1.41","MinAPIVersion":"1.12","Version":"20.10.0"}"#,
            )
        } else if path.contains("/_ping") {
            ("200 OK", "text/plain", "OK")
        } else if path.contains("/containers/json") {
            ("200 OK", "application/json", "[]")
        } else {
            (
                "404 Not Found",
                "application/json",
                r#"{"message":"not served by the fake daemon"}"#,
            )
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nApi-Version: 1.41\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn healthz(pool: &PoolProcess) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .get(format!("{}/healthz", pool.url))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// A lease request, with a client deadline far longer than the pool should take.
async fn lease(pool: &PoolProcess) -> (u16, serde_json::Value, Duration) {
    let started = Instant::now();
    let response = reqwest::Client::new()
        .post(format!("{}/v1/leases", pool.url))
        .json(&serde_json::json!({"image": pool_common::image()}))
        .timeout(Duration::from_secs(90))
        .send()
        .await
        .expect("the pool answers a lease request instead of hanging");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap(), started.elapsed())
}

fn assert_daemon_unavailable(status: u16, body: &serde_json::Value) {
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["kind"], "daemon_unavailable", "{body}");
    assert_eq!(body["error"]["retryable"], true, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_daemon_stops_answering_refuses_leases_with_a_typed_503_and_never_hangs() {
    deadline("daemon_unavailable", DEFAULT, async {
        let daemon = FakeDaemon::start();
        let spec = PoolSpec {
            docker_host: Some(daemon.docker_host()),
            ..PoolSpec::default()
        };
        let pool = PoolProcess::start(&unique("wedge"), &spec, 0);
        let (status, body) = healthz(&pool).await;
        assert_eq!((status, &body["status"]), (200, &"ok".into()), "{body}");

        // A request already waiting on the daemon when it wedges: answered once the probe
        // gives up (seconds), not after every Docker call's own deadline (minutes).
        daemon.wedge(true);
        let (status, body, took) = lease(&pool).await;
        assert_daemon_unavailable(status, &body);
        assert!(took < Duration::from_secs(30), "answered after {took:?}");

        // Later requests are refused at once, and /healthz says why.
        let (status, body, took) = lease(&pool).await;
        assert_daemon_unavailable(status, &body);
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        let (status, body) = healthz(&pool).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["status"], "unhealthy", "{body}");
        assert!(body["reason"].as_str().unwrap().contains("probe"), "{body}");

        // Healthy again once the daemon answers.
        daemon.wedge(false);
        let started = Instant::now();
        loop {
            let (status, body) = healthz(&pool).await;
            if status == 200 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "still unhealthy: {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}
