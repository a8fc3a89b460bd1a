//! The gateway against hostile pages and careless harnesses: bad session ids, rewards for
//! sessions that are not open, unbounded `max_tokens`, bodies past what the context can hold,
//! cross-site requests, non-JSON bodies, framework rejections, and a shutdown with a
//! generation that never ends. Each case failed (was accepted, hung or answered in another
//! shape) before the hardening.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::serve;
use serde_json::{json, Value};
use uniagent_core::{GenerateOutput, GenerateRequest, TokenGenerator};
use uniagent_gateway::{Gateway, GatewayConfig, Recorder, DEFAULT_MAX_TOKENS_CAP, SHUTDOWN_GRACE};

const DEADLINE: Duration = Duration::from_secs(60);

fn hello() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn session_ids_must_name_a_session() {
    tokio::time::timeout(DEADLINE, async {
        let s = serve("qwen2.5", GatewayConfig::default()).await;
        for path in [
            "/sessions//v1/chat/completions".to_owned(),
            "/sessions/%20%0A/v1/chat/completions".to_owned(),
            format!("/sessions/{}/v1/chat/completions", "x".repeat(300)),
        ] {
            let (status, v) = s.post(&path, &hello()).await;
            assert!((400..500).contains(&status), "{path}: {status} {v}");
            assert!(v["error"]["message"].is_string(), "{path}: {v}");
        }
        // Nothing was pooled under a blank id.
        assert!(s.gateway.chains("").await.is_none());
        assert!(s.script.requests.lock().unwrap().is_empty());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn rewards_need_an_open_session() {
    tokio::time::timeout(DEADLINE, async {
        let s = serve("qwen2.5", GatewayConfig::default()).await;
        let reward = json!({"score": 1.0});
        let (status, v) = s.post("/sessions/never/reward", &reward).await;
        assert_eq!((status, code(&v)), (404, "session_not_found"), "{v}");
        s.script.push_ids(s.turn("ok"));
        assert_eq!(s.chat("live", &hello()).await.0, 200);
        let (status, v) = s.post("/sessions/live/reward", &reward).await;
        assert_eq!(status, 200, "{v}");
        let ended = s.end("live").await;
        assert_eq!(ended[0]["reward_score"], 1.0);
        // After the end the record is written: a late reward would be lost, so it is refused,
        // and so is a request that would start a second record under the same id.
        let (status, v) = s.post("/sessions/live/reward", &reward).await;
        assert_eq!((status, code(&v)), (409, "session_ended"), "{v}");
        let (status, v) = s.chat("live", &hello()).await;
        assert_eq!((status, code(&v)), (409, "session_ended"), "{v}");
        // Ending stays idempotent.
        assert!(s.end("live").await.is_empty());
        // The Anthropic route answers in its own error shape.
        let (status, v) = s
            .post(
                "/sessions/live/v1/messages",
                &json!({"model": "m", "max_tokens": 8,
                        "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert_eq!(status, 409, "{v}");
        assert_eq!(v["type"], "error", "{v}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn max_tokens_is_capped() {
    tokio::time::timeout(DEADLINE, async {
        let s = serve("qwen2.5", GatewayConfig::default()).await;
        s.script.push_ids(s.turn("ok"));
        let mut body = hello();
        body["max_tokens"] = json!(4_294_967_295u64);
        let (status, v) = s.chat("cap", &body).await;
        assert_eq!(status, 200, "{v}");
        let asked = s.script.requests.lock().unwrap()[0].max_new_tokens;
        assert_eq!(asked, DEFAULT_MAX_TOKENS_CAP);
        // A smaller configured cap, and the context left, bound it further.
        let config = GatewayConfig::from_yaml(
            "max_tokens_cap: 64\ndefault_max_tokens: 16\nmax_model_len: 40\n",
        )
        .unwrap();
        let s = serve("qwen2.5", config).await;
        s.script.push_ids(s.turn("ok"));
        let (status, v) = s.chat("cap", &body).await;
        assert_eq!(status, 200, "{v}");
        let request = s.script.requests.lock().unwrap()[0].clone();
        assert_eq!(request.max_new_tokens, 40 - request.prompt_ids.len());
        assert!(GatewayConfig::from_yaml("max_tokens_cap: 8\n").is_err());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bodies_past_what_the_context_can_hold_are_refused_naming_the_limit() {
    tokio::time::timeout(DEADLINE, async {
        let config = GatewayConfig::from_yaml("max_model_len: 1024\n").unwrap();
        let limit = config.body_limit();
        let s = serve("qwen2.5", config).await;
        let huge = json!({"model": "m",
                          "messages": [{"role": "user", "content": "x".repeat(limit + 1)}]});
        let (status, v) = s.chat("big", &huge).await;
        assert_eq!((status, code(&v)), (413, "request_too_large"), "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&limit.to_string()),
            "{v}"
        );
        assert!(s.script.requests.lock().unwrap().is_empty());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn pages_of_other_sites_cannot_post() {
    tokio::time::timeout(DEADLINE, async {
        let s = serve("qwen2.5", GatewayConfig::default()).await;
        s.script.push_ids(s.turn("ok"));
        assert_eq!(s.chat("victim", &hello()).await.0, 200);
        let reward = format!("{}/sessions/victim/reward", s.base);
        // A form post from a page: cross-origin, and not JSON.
        let r = s
            .client
            .post(&reward)
            .header("origin", "https://evil.example")
            .header("content-type", "text/plain")
            .body(r#"{"score": -100}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        let v: Value = r.json().await.unwrap();
        assert_eq!(code(&v), "forbidden", "{v}");
        // The same without Origin (a non-browser client), still text/plain.
        let r = s
            .client
            .post(&reward)
            .header("content-type", "text/plain")
            .body(r#"{"score": -100}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415);
        // A DNS-rebinding page reaching the gateway under its own name.
        let r = s
            .client
            .post(format!("{}/sessions/victim/end", s.base))
            .header("host", "rebound.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        // The session is untouched: no reward, still open.
        assert_eq!(s.gateway.session_reward("victim").await, None);
        assert_eq!(s.end("victim").await.len(), 1);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn framework_rejections_are_openai_shaped_json() {
    tokio::time::timeout(DEADLINE, async {
        let s = serve("qwen2.5", GatewayConfig::default()).await;
        for (method, path, status) in [
            (reqwest::Method::GET, "/nope".to_owned(), 404),
            (
                reqwest::Method::GET,
                "/sessions/a/v1/chat/completions".to_owned(),
                405,
            ),
            (
                reqwest::Method::GET,
                format!("/healthz?{}", "q".repeat(20_000)),
                414,
            ),
        ] {
            let r = s
                .client
                .request(method, format!("{}{path}", s.base))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), status, "{path}");
            let v: Value = r.json().await.unwrap();
            assert!(v["error"]["message"].is_string(), "{v}");
        }
    })
    .await
    .unwrap();
}

/// A generator whose generation never ends (a long one on a slow engine); it says when a
/// generation has begun.
#[derive(Debug, Default)]
struct Endless {
    started: tokio::sync::Notify,
}

#[async_trait]
impl TokenGenerator for Endless {
    fn name(&self) -> &str {
        "endless"
    }

    async fn generate(&self, _: GenerateRequest) -> uniagent_core::Result<GenerateOutput> {
        self.started.notify_one();
        std::future::pending().await
    }
}

#[tokio::test]
async fn shutdown_with_a_generation_in_flight_ends_in_bounded_time_and_records_every_session() {
    tokio::time::timeout(DEADLINE, async {
        let out = tempfile::tempdir().unwrap();
        // A first session completes a turn on a scripted generator...
        let script = Arc::new(common::Script::default());
        let codec = common::codec("qwen2.5");
        let mut ids = codec.encode("done").unwrap();
        ids.push(codec.eos_token_id());
        script.push_ids(ids);
        let gateway = Arc::new(
            Gateway::new(common::codec("qwen2.5"), script, GatewayConfig::default())
                .with_recorder(Recorder::create(out.path()).unwrap()),
        );
        let body = serde_json::to_vec(&hello()).unwrap();
        let reply = gateway
            .exchange(
                "finished",
                uniagent_gateway::Route::ChatCompletions,
                &body,
                None,
            )
            .await;
        assert_eq!(reply.status, 200);
        // ...and the served gateway's generator then never answers.
        let endless = Arc::new(Endless::default());
        let stuck = Arc::new(
            Gateway::new(
                common::codec("qwen2.5"),
                endless.clone(),
                GatewayConfig::default(),
            )
            .with_recorder(Recorder::create(out.path()).unwrap()),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(uniagent_gateway::serve(
            listener,
            Arc::clone(&stuck),
            async {
                let _ = stopped.await;
            },
        ));
        let client = reqwest::Client::new();
        let request = tokio::spawn({
            let client = client.clone();
            let base = base.clone();
            async move {
                client
                    .post(format!("{base}/sessions/stuck/v1/chat/completions"))
                    .json(&hello())
                    .send()
                    .await
            }
        });
        // Wait until the stuck request is generating (it holds its session's lock).
        endless.started.notified().await;
        let started = Instant::now();
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        let took = started.elapsed();
        assert!(
            took < SHUTDOWN_GRACE + Duration::from_secs(5),
            "shutdown took {took:?}"
        );
        assert!(
            request.await.unwrap().is_err(),
            "the stuck client got an answer"
        );
        // The other gateway's session is recorded when it is ended.
        gateway.end_all().await.unwrap();
        let text = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["task_id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert!(ids.contains(&"finished".to_owned()), "{ids:?}");
    })
    .await
    .unwrap();
}
