//! [`VerlBridgeGenerator`]: token ids through a verl generation bridge, so that every
//! generation of a rollout goes through verl's own LLM client (`server_manager.generate`).
//!
//! The bridge is a small HTTP server in the verl agent-loop worker (the `uniagent-verl` Python
//! package). One `POST` per generation:
//!
//! ```text
//! {"request_id": "...", "prompt_ids": [...], "sampling_params": {...verl's...},
//!  "max_tokens": 512, "stop_token_ids": [151645]}
//! → {"token_ids": [...], "log_probs": [...] | null, "stop_reason": "completed" | "aborted" | null,
//!    "global_steps": 3 | null, "num_preempted": 0 | null}
//! ```

use std::sync::Mutex;

use serde_json::{json, Map, Value};
use uniagent_core::{Error, FinishReason, GenerateOutput, GenerateRequest, Result};

use super::http::{HttpClient, HttpModelConfig};

/// A [`TokenGenerator`](uniagent_core::TokenGenerator) for one verl rollout: every request
/// carries verl's `request_id` (its client routes a trajectory's turns to the same server) and
/// verl's sampling parameters, unchanged; the uniagent side adds only the token budget and the
/// stop ids its chat template needs. The request's own sampling settings are not sent: verl's
/// decide.
///
/// ```
/// use serde_json::json;
/// use uniagent_core::{GenerateRequest, SamplingParams};
/// use uniagent_models::{HttpModelConfig, VerlBridgeGenerator};
///
/// let config = HttpModelConfig::new(vec!["http://127.0.0.1:9/generate".into()], "verl");
/// let sampling = json!({"temperature": 1.0, "top_p": 1.0}).as_object().unwrap().clone();
/// let bridge = VerlBridgeGenerator::new(&config, "req-1", sampling).unwrap();
/// let request = GenerateRequest::new(vec![1, 2, 3], SamplingParams::greedy(), 16)
///     .with_stop_token_ids(vec![7]);
/// let body = bridge.request_body(&request);
/// assert_eq!(body["request_id"], "req-1");
/// assert_eq!(body["sampling_params"]["temperature"], 1.0);
/// assert_eq!((body["max_tokens"].as_u64(), body["stop_token_ids"][0].as_u64()), (Some(16), Some(7)));
/// ```
#[derive(Debug)]
pub struct VerlBridgeGenerator {
    http: HttpClient,
    request_id: String,
    sampling_params: Map<String, Value>,
    preempted: Mutex<i64>,
}

impl VerlBridgeGenerator {
    /// A generator posting to the bridge URL in `config.endpoints` (the full URL, path
    /// included) for verl's request `request_id`, with verl's `sampling_params`.
    pub fn new(
        config: &HttpModelConfig,
        request_id: impl Into<String>,
        sampling_params: Map<String, Value>,
    ) -> Result<Self> {
        Ok(Self {
            http: HttpClient::new(config, "verl-bridge")?,
            request_id: request_id.into(),
            sampling_params,
            preempted: Mutex::new(0),
        })
    }

    /// The request body for `request` (public for inspection and tests).
    pub fn request_body(&self, request: &GenerateRequest) -> Value {
        json!({
            "request_id": self.request_id,
            "prompt_ids": request.prompt_ids,
            "sampling_params": self.sampling_params,
            "max_tokens": request.max_new_tokens,
            "stop_token_ids": request.stop_token_ids,
        })
    }

    /// How many times verl's servers preempted this rollout's requests, summed over its
    /// generations (verl's `num_preempted` metric).
    pub fn num_preempted(&self) -> i64 {
        self.preempted.lock().map_or(0, |n| *n)
    }
}

fn protocol(message: impl Into<String>) -> Error {
    Error::Protocol {
        message: format!("verl bridge: {}", message.into()),
    }
}

/// Reads a bridge answer for a request that allowed `max_tokens` and stops on `stop_ids`.
///
/// verl reports `completed` for both a stop and a full budget, so the finish reason is read
/// from the tokens: a last token among `stop_ids` is a stop, a full budget without one is a
/// length cut, and fewer tokens than allowed mean the server stopped on its own stop condition
/// (the tokenizer's end-of-sequence id).
///
/// ```
/// use serde_json::json;
/// use uniagent_core::FinishReason;
/// use uniagent_models::parse_bridge_answer;
/// let out = parse_bridge_answer(
///     &json!({"token_ids": [5, 7], "log_probs": [-0.5, -0.1], "stop_reason": "completed", "global_steps": 4}),
///     16,
///     &[7],
/// ).unwrap();
/// assert_eq!((out.finish_reason, out.weight_version), (FinishReason::Stop, Some(4)));
/// assert!(parse_bridge_answer(&json!({"token_ids": [5], "log_probs": []}), 16, &[7]).is_err());
/// ```
pub fn parse_bridge_answer(
    body: &Value,
    max_tokens: usize,
    stop_ids: &[u32],
) -> Result<GenerateOutput> {
    let token_ids: Vec<u32> = body
        .get("token_ids")
        .and_then(Value::as_array)
        .ok_or_else(|| protocol("the answer has no `token_ids` list"))?
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| protocol(format!("token id {v} is not a token id")))
        })
        .collect::<Result<_>>()?;
    if token_ids.len() > max_tokens {
        return Err(protocol(format!(
            "{} tokens returned, {max_tokens} allowed",
            token_ids.len()
        )));
    }
    let logprobs = match body.get("log_probs") {
        None | Some(Value::Null) => None,
        Some(Value::Array(lps)) => {
            let lps: Vec<f32> = lps
                .iter()
                .map(|v| {
                    v.as_f64()
                        .map(|lp| lp as f32)
                        .ok_or_else(|| protocol(format!("log prob {v} is not a number")))
                })
                .collect::<Result<_>>()?;
            if lps.len() != token_ids.len() {
                return Err(protocol(format!(
                    "{} tokens but {} log probs",
                    token_ids.len(),
                    lps.len()
                )));
            }
            Some(lps)
        }
        Some(other) => return Err(protocol(format!("`log_probs` is {other}, not a list"))),
    };
    let finish_reason = match body.get("stop_reason").and_then(Value::as_str) {
        Some("aborted") => FinishReason::Abort,
        _ if token_ids.last().is_some_and(|t| stop_ids.contains(t)) => FinishReason::Stop,
        _ if token_ids.len() == max_tokens => FinishReason::Length,
        _ => FinishReason::Stop,
    };
    let weight_version = match body.get("global_steps") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| protocol(format!("`global_steps` {v} is not a step number")))?,
        ),
    };
    Ok(GenerateOutput {
        token_ids,
        logprobs,
        finish_reason,
        weight_version,
    })
}

#[async_trait::async_trait]
impl uniagent_core::TokenGenerator for VerlBridgeGenerator {
    fn name(&self) -> &str {
        "verl-bridge"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        if request.prompt_ids.is_empty() {
            return Err(Error::invalid_input("verl bridge: empty prompt"));
        }
        if request.max_new_tokens == 0 {
            return Ok(GenerateOutput {
                token_ids: Vec::new(),
                logprobs: Some(Vec::new()),
                finish_reason: FinishReason::Length,
                weight_version: None,
            });
        }
        let body = self.request_body(&request);
        let answer = self
            .http
            .post_json("", &body, Some(&self.request_id))
            .await?;
        if let Some(n) = answer.get("num_preempted").and_then(Value::as_i64) {
            if let Ok(mut total) = self.preempted.lock() {
                *total += n.max(0);
            }
        }
        parse_bridge_answer(&answer, request.max_new_tokens, &request.stop_token_ids)
    }
}
