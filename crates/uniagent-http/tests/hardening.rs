//! The hardened server against hostile clients, over real sockets: slow headers, too many
//! connections, cross-site requests, non-JSON bodies, framework rejections and shutdown with
//! work in flight. Every test runs under an overall deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Path;
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use uniagent_http::{error_body, serve, Hardening, ServeLimits, SitePolicy, MAX_URI_BYTES};

const DEADLINE: Duration = Duration::from_secs(60);

struct Server {
    addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(app: Router, limits: ServeLimits) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            stop: Some(stop),
            done,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn stop(mut self) -> Duration {
        let started = Instant::now();
        let _ = self.stop.take().unwrap().send(());
        self.done.await.unwrap().unwrap();
        started.elapsed()
    }
}

fn app() -> Router {
    let routes = Router::new()
        .route(
            "/api/items/{n}",
            get(|Path(n): Path<u32>| async move { format!("{n}") }),
        )
        .route("/api/post", post(|body: String| async move { body }));
    Hardening::new(
        SitePolicy::local().allow_hosts(["viewer.internal"]),
        error_body,
    )
    .apply(routes)
}

async fn json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(kind.starts_with("application/json"), "not JSON: {kind}");
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn framework_rejections_are_json_with_their_status() {
    tokio::time::timeout(DEADLINE, async {
        let server = Server::start(app(), ServeLimits::default()).await;
        let client = reqwest::Client::new();
        let (status, body) = json(client.get(server.url("/nope")).send().await.unwrap()).await;
        assert_eq!(status, 404);
        assert!(body["error"].is_string());
        let response = client.delete(server.url("/api/post")).send().await.unwrap();
        assert_eq!(response.headers()["allow"], "POST");
        let (status, body) = json(response).await;
        assert_eq!(status, 405);
        assert_eq!(body["error"], "Method Not Allowed");
        let (status, body) = json(
            client
                .get(server.url("/api/items/notanumber"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400);
        assert!(body["error"].as_str().unwrap().contains("parse"), "{body}");
        let long = format!("/api/items/1?q={}", "a".repeat(MAX_URI_BYTES));
        let (status, body) = json(client.get(server.url(&long)).send().await.unwrap()).await;
        assert_eq!(status, 414);
        assert!(body["error"].as_str().unwrap().contains("at most"));
        // What passes the checks is answered as the route says.
        let ok = client.get(server.url("/api/items/7")).send().await.unwrap();
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.text().await.unwrap(), "7");
        server.stop().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn cross_site_requests_and_non_json_posts_are_refused() {
    tokio::time::timeout(DEADLINE, async {
        let server = Server::start(app(), ServeLimits::default()).await;
        let client = reqwest::Client::new();
        // A page on another site posting a "simple" request.
        let (status, body) = json(
            client
                .post(server.url("/api/post"))
                .header("origin", "https://evil.example")
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["error"].as_str().unwrap()),
            (403, "Forbidden: cross-origin request")
        );
        // A DNS-rebinding page: its own name in Host, same-origin to the browser.
        let rebound = format!("evil.example:{}", server.addr.port());
        let (status, _) = json(
            client
                .get(server.url("/api/items/1"))
                .header("host", &rebound)
                .header("origin", format!("http://{rebound}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 403);
        // An allow-listed name is answered.
        let named = client
            .get(server.url("/api/items/1"))
            .header("host", format!("viewer.internal:{}", server.addr.port()))
            .send()
            .await
            .unwrap();
        assert_eq!(named.status(), 200);
        // text/plain needs no preflight in a browser: refused.
        let (status, _) = json(
            client
                .post(server.url("/api/post"))
                .header("content-type", "text/plain")
                .body("{}")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 415);
        // An empty body labelled as a form (Python's urllib does that) has nothing to misread.
        let empty = client
            .post(server.url("/api/post"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("")
            .send()
            .await
            .unwrap();
        assert_eq!(empty.status(), 200);
        let same_origin = client
            .post(server.url("/api/post"))
            .header("origin", format!("http://{}", server.addr))
            .header("content-type", "application/json")
            .body("{\"a\":1}")
            .send()
            .await
            .unwrap();
        assert_eq!(same_origin.status(), 200);
        server.stop().await;
    })
    .await
    .unwrap();
}

/// Reads until the server closes the connection; `true` when it did within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let give_up = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(give_up.into(), stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn slow_header_clients_are_cut_off_and_cannot_hold_every_slot() {
    tokio::time::timeout(DEADLINE, async {
        let limits = ServeLimits {
            max_connections: 4,
            header_timeout: Duration::from_millis(400),
            ..ServeLimits::default()
        };
        let server = Server::start(app(), limits).await;
        // Slowloris: more connections than slots, each sending an unfinished request head.
        let mut slow = Vec::new();
        for _ in 0..8 {
            let mut s = TcpStream::connect(server.addr).await.unwrap();
            s.write_all(b"GET /api/items/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .await
                .unwrap();
            slow.push(s);
        }
        // A real client is still answered, once header deadlines free the slots.
        let started = Instant::now();
        let answer = reqwest::Client::new()
            .get(server.url("/api/items/5"))
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert!(started.elapsed() < Duration::from_secs(10));
        // Each slow connection is closed by the server.
        for s in &mut slow {
            assert!(closed_within(s, Duration::from_secs(10)).await);
        }
        server.stop().await;
    })
    .await
    .unwrap();
}

/// Sets its flag when dropped: shows that a cancelled handler's future was dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn shutdown_ends_in_bounded_time_and_cancels_what_still_runs() {
    tokio::time::timeout(DEADLINE, async {
        let dropped = Arc::new(AtomicBool::new(false));
        let (entered_tx, entered) = tokio::sync::mpsc::channel::<()>(1);
        let flag = Arc::clone(&dropped);
        let routes = Router::new().route(
            "/forever",
            get(move || {
                let flag = Arc::clone(&flag);
                let entered_tx = entered_tx.clone();
                async move {
                    let _guard = Dropped(flag);
                    let _ = entered_tx.send(()).await;
                    std::future::pending::<()>().await;
                    "never"
                }
            }),
        );
        let limits = ServeLimits {
            shutdown_grace: Duration::from_millis(300),
            ..ServeLimits::default()
        };
        let server = Server::start(routes, limits).await;
        let url = server.url("/forever");
        let client = tokio::spawn(async move { reqwest::get(url).await });
        let mut entered = entered;
        entered.recv().await.unwrap();
        let took = server.stop().await;
        assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
        assert!(
            dropped.load(Ordering::SeqCst),
            "the running handler was not cancelled"
        );
        // The client sees its connection end instead of hanging.
        assert!(client.await.unwrap().is_err());
    })
    .await
    .unwrap();
}
