//! Fault injection, model backends: raw-TCP peers on loopback that truncate JSON, reset
//! mid-body, send huge bodies, rate-limit with `Retry-After`, blackhole connections, answer 501,
//! or are all down. Every case ends in a typed error or a success on a healthy endpoint, within
//! bounded time.

#![cfg(feature = "vllm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uniagent_core::{Error, GenerateRequest, RetryConfig, SamplingParams, TokenGenerator};
use uniagent_models::{HttpModelConfig, VllmGenerator};

/// What the peer does with one request.
#[derive(Clone)]
enum Act {
    /// Answers `status` with `headers` and `body`.
    Answer(u16, &'static str, String),
    /// Declares more body than it sends, then closes.
    Truncate,
    /// Sends half the headers and body, then resets the connection.
    Reset,
    /// Declares and streams `n` bytes of JSON-ish filler.
    Huge(usize),
}

fn good_body() -> String {
    json!({"choices": [{"index": 0, "text": "x", "finish_reason": "stop", "stop_reason": 151645,
        "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.5], "text_offset": [0], "top_logprobs": [{"token_id:7": -0.5}]}}]})
    .to_string()
}

async fn read_request(stream: &mut TcpStream) -> bool {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut buf).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while data.len() < end + 4 + len {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => data.extend_from_slice(&buf[..n]),
                }
            }
            return true;
        }
    }
}

/// A peer that applies `acts` in order (the last one repeats); returns its URL and the times
/// requests arrived.
async fn peer(acts: Vec<Act>) -> (String, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        let mut n = 0usize;
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let act = acts[n.min(acts.len() - 1)].clone();
            n += 1;
            let log = log.clone();
            tokio::spawn(async move {
                if !read_request(&mut stream).await {
                    return;
                }
                log.lock().unwrap().push(Instant::now());
                match act {
                    Act::Answer(status, headers, body) => {
                        let head = format!("HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n", body.len());
                        let _ = stream.write_all(head.as_bytes()).await;
                        let _ = stream.write_all(body.as_bytes()).await;
                    }
                    Act::Truncate => {
                        let body = good_body();
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len() + 100);
                        let _ = stream.write_all(head.as_bytes()).await;
                        let _ = stream.write_all(&body.as_bytes()[..body.len() / 2]).await;
                    }
                    Act::Reset => {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n{\"choi")
                            .await;
                        let _ = stream.set_zero_linger();
                    }
                    Act::Huge(n) => {
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {n}\r\n\r\n");
                        let _ = stream.write_all(head.as_bytes()).await;
                        let chunk = vec![b' '; 64 << 10];
                        let mut sent = 0;
                        while sent < n {
                            let k = chunk.len().min(n - sent);
                            if stream.write_all(&chunk[..k]).await.is_err() {
                                break;
                            }
                            sent += k;
                        }
                    }
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    (url, seen)
}

fn request() -> GenerateRequest {
    GenerateRequest::new(vec![1, 2, 3], SamplingParams::default(), 8).with_session_id("traj")
}

fn config(endpoints: Vec<String>) -> HttpModelConfig {
    HttpModelConfig {
        retry: RetryConfig {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            jitter: 0.0,
            ..RetryConfig::default()
        },
        timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_millis(300),
        max_response_bytes: 1 << 20,
        ..HttpModelConfig::new(endpoints, "m")
    }
}

async fn generate(cfg: &HttpModelConfig) -> Result<Vec<u32>, Error> {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        VllmGenerator::new(cfg).unwrap().generate(request()),
    )
    .await
    .expect("the call must end on its own");
    out.map(|o| o.token_ids)
}

#[tokio::test]
async fn truncated_and_reset_bodies_are_retried_then_succeed() {
    let (url, seen) = peer(vec![
        Act::Truncate,
        Act::Reset,
        Act::Answer(200, "", good_body()),
    ])
    .await;
    assert_eq!(generate(&config(vec![url])).await.unwrap(), vec![7]);
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn invalid_json_is_a_protocol_error() {
    let (url, _) = peer(vec![Act::Answer(200, "", "{\"choices\": [".into())]).await;
    let e = generate(&config(vec![url])).await.unwrap_err();
    assert!(matches!(e, Error::Protocol { .. }), "{e}");
}

#[tokio::test]
async fn huge_bodies_are_refused_without_reading_them_whole() {
    let (url, seen) = peer(vec![Act::Huge(200 << 20)]).await;
    let e = generate(&config(vec![url])).await.unwrap_err();
    assert!(
        matches!(&e, Error::Protocol { message } if message.contains("max_response_bytes")),
        "{e}"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "a protocol error is not retried"
    );
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let (url, seen) = peer(vec![
        Act::Answer(
            429,
            "retry-after: 1\r\n",
            "{\"error\":\"slow down\"}".into(),
        ),
        Act::Answer(200, "", good_body()),
    ])
    .await;
    assert_eq!(generate(&config(vec![url])).await.unwrap(), vec![7]);
    let times = seen.lock().unwrap().clone();
    assert_eq!(times.len(), 2);
    // The server asked for one second; the backoff alone is a few milliseconds.
    assert!(
        times[1] - times[0] >= Duration::from_millis(900),
        "retried after {:?}",
        times[1] - times[0]
    );
}

#[tokio::test]
async fn not_implemented_is_not_retried() {
    let (url, seen) = peer(vec![Act::Answer(501, "", "{}".into())]).await;
    let e = generate(&config(vec![url])).await.unwrap_err();
    assert!(!e.is_retryable() && e.to_string().contains("501"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// A loopback port whose accept queue is full: SYNs are dropped, connects hang.
async fn blackhole() -> (String, Vec<std::net::TcpStream>, tokio::net::TcpListener) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    // Fill the queue (backlog + 1 entries); stop once a connect no longer completes at once.
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => fillers.push(s),
            Err(_) => break,
        }
    }
    (format!("http://{addr}"), fillers, listener)
}

#[tokio::test]
async fn a_blackholed_endpoint_costs_a_connect_timeout_not_the_request_timeout() {
    let (dead, _fillers, _listener) = blackhole().await;
    let (good, seen) = peer(vec![Act::Answer(200, "", good_body())]).await;
    let cfg = config(vec![dead, good]);
    // Several requests: whichever picks the blackholed endpoint first moves to the good one.
    for _ in 0..3 {
        assert_eq!(generate(&cfg).await.unwrap(), vec![7]);
    }
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn all_endpoints_down_is_a_typed_retryable_failure() {
    let mut urls = Vec::new();
    for _ in 0..2 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        urls.push(format!("http://{}", l.local_addr().unwrap()));
    }
    let e = generate(&config(urls)).await.unwrap_err();
    assert!(
        matches!(&e, Error::RetriesExhausted { attempts: 3, .. }),
        "{e:?}"
    );
}

#[test]
fn the_api_key_stays_out_of_debug_output() {
    std::env::set_var("UNIAGENT_FAULT_MODELS_KEY", "sk-very-secret-key");
    let cfg = HttpModelConfig {
        api_key_env: Some("UNIAGENT_FAULT_MODELS_KEY".into()),
        ..config(vec!["http://127.0.0.1:1".into()])
    };
    let generator = VllmGenerator::new(&cfg).unwrap();
    let shown = format!("{generator:?}");
    assert!(!shown.contains("sk-very-secret"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}
