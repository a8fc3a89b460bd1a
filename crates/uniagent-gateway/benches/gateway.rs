//! The gateway's own cost per request at turn 10 / 100 / 500 of a session, against the codec
//! append alone at the same length, measured in the same run.
//!
//! Gateway: parse the OpenAI body (the whole conversation, as a harness resends it), match it
//! to the chain, append the new message, "generate" (an instant generator returning a fixed
//! turn), append the sampled turn, build the answer. Baseline: `Codec::append_messages` plus
//! `Codec::append_sampled` on a rollout cache of the same length (the incremental tokenization
//! any token-exact loop pays). The figure that matters is the ratio.
//!
//! `cargo bench -p uniagent-gateway --bench gateway` (under `cargo test` it runs one quick pass).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Value};
use uniagent_core::codec::Codec;
use uniagent_core::{
    FinishReason, GenerateOutput, GenerateRequest, LengthLimits, Message, TokenGenerator,
};
use uniagent_gateway::wire::openai;
use uniagent_gateway::{Gateway, GatewayConfig};

fn codec() -> Codec {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../uniagent-core/tests/fixtures/tokenizers/qwen2.5");
    Codec::from_dir(dir).unwrap()
}

/// Answers every request at once with the same turn.
#[derive(Debug)]
struct Instant_ {
    ids: Vec<u32>,
}

#[async_trait]
impl TokenGenerator for Instant_ {
    fn name(&self) -> &str {
        "instant"
    }
    async fn generate(&self, _: GenerateRequest) -> uniagent_core::Result<GenerateOutput> {
        Ok(GenerateOutput {
            token_ids: self.ids.clone(),
            logprobs: Some(vec![-0.5; self.ids.len()]),
            finish_reason: FinishReason::Stop,
            weight_version: Some(1),
        })
    }
}

const ANSWER: &str = "I ran the command; the output shows two files, main.rs and lib.rs.";
const OBSERVATION: &str =
    "total 8\n-rw-r--r-- 1 user user 120 main.rs\n-rw-r--r-- 1 user user 80 lib.rs";

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Median cost of one gateway request at turn `turns`, over `samples` requests.
fn gateway_cost(rt: &tokio::runtime::Runtime, c: &Codec, turns: usize, samples: usize) -> Duration {
    let mut ids = c.encode(ANSWER).unwrap();
    ids.push(c.eos_token_id());
    let gateway = Gateway::new(
        codec(),
        Arc::new(Instant_ { ids }),
        GatewayConfig::default(),
    );
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the bug."}),
    ];
    let mut times = Vec::new();
    for turn in 0..turns + samples {
        let body = serde_json::to_vec(&json!({"model": "m", "messages": messages})).unwrap();
        let started = Instant::now();
        let (req, _) = openai::parse_request(&body).unwrap();
        let answer = rt.block_on(gateway.complete("bench", req)).unwrap();
        let reply = openai::response(&answer, "id", "m", 0, false);
        let elapsed = started.elapsed();
        if turn >= turns {
            times.push(elapsed);
        }
        messages.push(reply["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": format!("{OBSERVATION}\n(turn {turn})")}));
    }
    median(times)
}

/// Median cost of the codec's append alone (observation then sampled turn) at turn `turns`.
fn codec_cost(c: &Codec, turns: usize, samples: usize) -> Duration {
    let mut ids = c.encode(ANSWER).unwrap();
    ids.push(c.eos_token_id());
    let lps = vec![-0.5; ids.len()];
    let mut cache = c
        .start(
            "bench",
            vec![
                Message::system("You are a coding agent."),
                Message::user("Fix the bug."),
            ],
            vec![],
            Default::default(),
            LengthLimits::default(),
        )
        .unwrap();
    let mut times = Vec::new();
    for turn in 0..turns + samples {
        let started = Instant::now();
        c.append_sampled(&mut cache, &ids, &lps, Some(1)).unwrap();
        c.append_messages(
            &mut cache,
            &[Message::user(format!("{OBSERVATION}\n(turn {turn})"))],
        )
        .unwrap();
        let elapsed = started.elapsed();
        if turn >= turns {
            times.push(elapsed);
        }
    }
    median(times)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let c = codec();
    let (points, samples): (&[usize], usize) = if full {
        (&[10, 100, 500], 31)
    } else {
        (&[10], 3)
    };
    let mut rows: Vec<Value> = Vec::new();
    for &turns in points {
        let base = codec_cost(&c, turns, samples);
        let gw = gateway_cost(&rt, &c, turns, samples);
        let ratio = gw.as_secs_f64() / base.as_secs_f64();
        println!(
            "turn {turns:>4}: gateway {:>9.1} µs  codec append {:>8.1} µs  ratio {ratio:.2}",
            gw.as_secs_f64() * 1e6,
            base.as_secs_f64() * 1e6
        );
        rows.push(json!({"turn": turns, "gateway_us": gw.as_secs_f64() * 1e6,
                         "codec_append_us": base.as_secs_f64() * 1e6, "ratio": ratio}));
    }
    if full {
        println!("{}", Value::Array(rows));
    }
}
