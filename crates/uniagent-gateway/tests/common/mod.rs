//! Shared test parts: a scripted token generator (the policy is not what these tests test),
//! the in-repo tokenizer fixtures, and a gateway served on a free port that records every
//! session as a cassette and checks, when the test ends it, that it replays identically.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use uniagent_core::codec::Codec;
use uniagent_core::{Error, FinishReason, GenerateOutput, GenerateRequest, TokenGenerator};
use uniagent_gateway::cassette::{replay, GatewayCassette, CASSETTES};
use uniagent_gateway::{Gateway, GatewayConfig, Recorder};

pub mod http;
pub mod sdk;

/// The Qwen2.5 or Qwen3 tokenizer and chat template of uniagent-core's fixtures.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../uniagent-core/tests/fixtures/tokenizers")
        .join(name)
}

pub fn codec(name: &str) -> Codec {
    Codec::from_dir(fixture(name)).unwrap()
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub ids: Vec<u32>,
    /// `None`: the generator reports no logprobs.
    pub logprobs: Option<Vec<f32>>,
    pub fail: bool,
}

/// Answers requests from a queue of replies and records every request.
#[derive(Debug, Default)]
pub struct Script {
    replies: Mutex<VecDeque<Reply>>,
    pub requests: Mutex<Vec<GenerateRequest>>,
}

impl Script {
    /// Drops replies left over (a failed case must not shift the next one's).
    pub fn clear(&self) {
        self.replies.lock().unwrap().clear();
    }

    pub fn push(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }

    /// Queues `ids` with logprobs -0.1, -0.2, ... (distinct, so tests can tell them apart).
    pub fn push_ids(&self, ids: Vec<u32>) {
        let logprobs = (0..ids.len()).map(|i| -0.1 * (i as f32 + 1.0)).collect();
        self.push(Reply {
            ids,
            logprobs: Some(logprobs),
            fail: false,
        });
    }

    pub fn prompts(&self) -> Vec<Vec<u32>> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.prompt_ids.clone())
            .collect()
    }
}

#[async_trait]
impl TokenGenerator for Script {
    fn name(&self) -> &str {
        "script"
    }

    async fn generate(&self, request: GenerateRequest) -> uniagent_core::Result<GenerateOutput> {
        let max = request.max_new_tokens;
        let stops = request.stop_token_ids.clone();
        self.requests.lock().unwrap().push(request);
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| Error::internal("script exhausted"))?;
        if reply.fail {
            return Err(Error::Model {
                backend: "script".into(),
                message: "scripted failure".into(),
                retryable: false,
                source: None,
            });
        }
        // Like an engine: stop after a stop id, or after `max_new_tokens`.
        let mut ids = Vec::new();
        let mut finish = FinishReason::Length;
        for id in reply.ids {
            if ids.len() == max {
                break;
            }
            ids.push(id);
            if stops.contains(&id) {
                finish = FinishReason::Stop;
                break;
            }
        }
        let logprobs = reply.logprobs.map(|l| l[..ids.len()].to_vec());
        Ok(GenerateOutput {
            token_ids: ids,
            logprobs,
            finish_reason: finish,
            weight_version: Some(7),
        })
    }
}

/// A gateway on a free port.
pub struct Served {
    pub base: String,
    pub gateway: Arc<Gateway>,
    pub script: Arc<Script>,
    /// A second codec with the same tokenizer, for building scripted replies.
    pub codec: Codec,
    pub client: reqwest::Client,
    tokenizer: String,
    cassettes: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve(tokenizer: &str, config: GatewayConfig) -> Served {
    let script = Arc::new(Script::default());
    let cassettes = tempfile::tempdir().unwrap();
    let recorder = Recorder::open(cassettes.path(), CASSETTES).unwrap();
    let gateway = Arc::new(
        Gateway::new(codec(tokenizer), script.clone(), config)
            .with_cassettes(recorder, Value::Null),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = uniagent_gateway::router(Arc::clone(&gateway));
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Served {
        base,
        gateway,
        script,
        codec: codec(tokenizer),
        client: reqwest::Client::new(),
        tokenizer: tokenizer.to_owned(),
        cassettes,
        task,
    }
}

impl Served {
    /// The ids of `text` followed by the end-of-turn id.
    pub fn turn(&self, text: &str) -> Vec<u32> {
        let mut ids = self.codec.encode(text).unwrap();
        ids.push(self.codec.eos_token_id());
        ids
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn post_raw(&self, path: &str, body: &str) -> (u16, String) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    pub async fn chat(&self, session: &str, body: &Value) -> (u16, Value) {
        self.post(&format!("/sessions/{session}/v1/chat/completions"), body)
            .await
    }

    pub async fn end(&self, session: &str) -> Vec<Value> {
        let (status, v) = self
            .post(&format!("/sessions/{session}/end"), &Value::Null)
            .await;
        assert_eq!(status, 200, "{v}");
        self.assert_replays(session).await;
        v.as_array().unwrap().clone()
    }

    /// The latest cassette of `session` replays identically (no cassette: nothing to check).
    pub async fn assert_replays(&self, session: &str) {
        let text =
            std::fs::read_to_string(self.cassettes.path().join(CASSETTES)).unwrap_or_default();
        let Some(cassette) = text
            .lines()
            .map(|l| GatewayCassette::from_json(l).unwrap())
            .rfind(|c| c.id == session)
        else {
            return;
        };
        let outcome = replay(&cassette, codec(&self.tokenizer)).await.unwrap();
        assert_eq!(
            outcome.divergence, None,
            "session {session} does not replay"
        );
    }
}

/// The `data:` payloads (and `event:` names) of an SSE body.
pub fn sse(body: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut event = None;
    for line in body.lines() {
        if let Some(e) = line.strip_prefix("event: ") {
            event = Some(e.to_owned());
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((event.take(), d.to_owned()));
        }
    }
    out
}

/// Mask-1 ids of a trajectory, in order.
pub fn sampled(t: &Value) -> Vec<u64> {
    let ids = t["response_ids"].as_array().unwrap();
    let mask = t["response_mask"].as_array().unwrap();
    ids.iter()
        .zip(mask)
        .filter(|(_, m)| m.as_u64() == Some(1))
        .map(|(i, _)| i.as_u64().unwrap())
        .collect()
}
