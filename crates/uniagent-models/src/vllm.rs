//! [`VllmGenerator`]: token ids through vLLM's `/v1/completions`.

use serde_json::{json, Value};
use uniagent_core::{Error, FinishReason, GenerateOutput, GenerateRequest, Result};

use super::http::{ids_agree, impl_token_generator, HttpClient, HttpModelConfig};

/// A [`TokenGenerator`](uniagent_core::TokenGenerator) over one or more vLLM servers.
///
/// The prompt goes out as token ids (`"prompt": [ids]`) and the sampled ids come back exactly:
/// the request asks for `logprobs: 1` and `return_tokens_as_token_ids: true`, so every sampled
/// token is reported as `"token_id:<id>"` with its logprob (the stop token included, since
/// vLLM keeps stop-token ids in the output). Special tokens are not skipped. A newer server's
/// `token_ids` field, when present, must agree.
#[derive(Debug)]
pub struct VllmGenerator {
    http: HttpClient,
    model: String,
}

impl VllmGenerator {
    /// A generator over the servers of `config`.
    pub fn new(config: &HttpModelConfig) -> Result<Self> {
        Ok(Self {
            http: HttpClient::new(config, "vllm")?,
            model: config.model.clone(),
        })
    }

    /// The request body for `request` (public for inspection and tests).
    pub fn request_body(&self, request: &GenerateRequest) -> Value {
        let s = &request.sampling;
        let mut body = json!({
            "model": self.model,
            "prompt": request.prompt_ids,
            "max_tokens": request.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k.map_or(-1, i64::from),
            "logprobs": 1,
            "return_tokens_as_token_ids": true,
            "stop_token_ids": request.stop_token_ids,
            "skip_special_tokens": false,
            "spaces_between_special_tokens": false,
        });
        if let (Some(seed), Some(map)) = (s.seed, body.as_object_mut()) {
            map.insert("seed".into(), json!(seed));
        }
        body
    }
}

fn protocol(message: impl Into<String>) -> Error {
    Error::Protocol {
        message: format!("vllm: {}", message.into()),
    }
}

fn finish_reason(v: Option<&str>) -> FinishReason {
    match v {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("abort") => FinishReason::Abort,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Other("none".into()),
    }
}

/// Parses a `/v1/completions` response into ids, logprobs and finish reason (public for the
/// fuzz target: any JSON gives an output or a typed error).
pub fn parse_completion(body: &Value) -> Result<GenerateOutput> {
    let choice = body["choices"]
        .get(0)
        .ok_or_else(|| protocol("response has no choices"))?;
    let logprobs = &choice["logprobs"];
    let tokens = logprobs["tokens"]
        .as_array()
        .ok_or_else(|| protocol("choice has no logprobs.tokens"))?;
    let mut token_ids = Vec::with_capacity(tokens.len());
    for t in tokens {
        let id = t
            .as_str()
            .and_then(|s| s.strip_prefix("token_id:"))
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| {
                protocol(format!(
                    "token {t} is not `token_id:<id>` (is return_tokens_as_token_ids on?)"
                ))
            })?;
        token_ids.push(id);
    }
    let lps = logprobs["token_logprobs"]
        .as_array()
        .ok_or_else(|| protocol("choice has no logprobs.token_logprobs"))?;
    let logprobs: Vec<f32> = lps
        .iter()
        .map(|v| {
            v.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| protocol(format!("logprob {v} is not a number")))
        })
        .collect::<Result<_>>()?;
    if logprobs.len() != token_ids.len() {
        return Err(protocol(format!(
            "{} tokens but {} logprobs",
            token_ids.len(),
            logprobs.len()
        )));
    }
    if let Some(ids) = choice.get("token_ids").and_then(Value::as_array) {
        if !ids_agree(ids, &token_ids) {
            return Err(protocol("`token_ids` disagrees with logprobs.tokens"));
        }
    }
    Ok(GenerateOutput {
        token_ids,
        logprobs: Some(logprobs),
        finish_reason: finish_reason(choice["finish_reason"].as_str()),
        weight_version: None,
    })
}

impl_token_generator!(VllmGenerator, "vllm", "/v1/completions", parse_completion);
