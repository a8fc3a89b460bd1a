//! [`SglangGenerator`]: token ids through SGLang's native `/generate`.

use serde_json::{json, Value};
use uniagent_core::{Error, FinishReason, GenerateOutput, GenerateRequest, Result};

use super::http::{ids_agree, impl_token_generator, HttpClient, HttpModelConfig};

/// A [`TokenGenerator`](uniagent_core::TokenGenerator) over one or more SGLang servers.
///
/// Sends `input_ids` with `return_logprob: true` and reads the sampled ids and their logprobs
/// from `meta_info.output_token_logprobs` (`[logprob, id, text]` triples); `output_ids`, when
/// the server sends it, must agree. Stop tokens are kept (`no_stop_trim`), special tokens not
/// skipped. `meta_info.weight_version` becomes the weight version when it is an integer.
#[derive(Debug)]
pub struct SglangGenerator {
    http: HttpClient,
}

impl SglangGenerator {
    /// A generator over the servers of `config` (`config.model` is not sent: SGLang serves one).
    pub fn new(config: &HttpModelConfig) -> Result<Self> {
        Ok(Self {
            http: HttpClient::new(config, "sglang")?,
        })
    }

    /// The request body for `request` (public for inspection and tests).
    pub fn request_body(&self, request: &GenerateRequest) -> Value {
        let s = &request.sampling;
        let mut sampling = json!({
            "max_new_tokens": request.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k.map_or(-1, i64::from),
            "stop_token_ids": request.stop_token_ids,
            "skip_special_tokens": false,
            "no_stop_trim": true,
        });
        if let (Some(seed), Some(map)) = (s.seed, sampling.as_object_mut()) {
            map.insert("sampling_seed".into(), json!(seed));
        }
        json!({"input_ids": request.prompt_ids, "sampling_params": sampling, "return_logprob": true})
    }
}

fn protocol(message: impl Into<String>) -> Error {
    Error::Protocol {
        message: format!("sglang: {}", message.into()),
    }
}

/// Parses a `/generate` response (public for the fuzz target: any JSON gives an output or a
/// typed error).
pub fn parse_generate(body: &Value) -> Result<GenerateOutput> {
    let meta = body
        .get("meta_info")
        .ok_or_else(|| protocol("response has no meta_info"))?;
    let triples = meta["output_token_logprobs"]
        .as_array()
        .ok_or_else(|| protocol("meta_info has no output_token_logprobs"))?;
    let mut token_ids = Vec::with_capacity(triples.len());
    let mut logprobs = Vec::with_capacity(triples.len());
    for t in triples {
        let lp = t.get(0).and_then(Value::as_f64);
        let id = t
            .get(1)
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok());
        match (lp, id) {
            (Some(lp), Some(id)) => {
                logprobs.push(lp as f32);
                token_ids.push(id);
            }
            _ => {
                return Err(protocol(format!(
                    "output_token_logprobs entry {t} is not [logprob, id, text]"
                )))
            }
        }
    }
    if let Some(ids) = body.get("output_ids").and_then(Value::as_array) {
        if !ids_agree(ids, &token_ids) {
            return Err(protocol(
                "`output_ids` disagrees with output_token_logprobs",
            ));
        }
    }
    let finish_reason = match meta["finish_reason"]["type"].as_str() {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("abort") => FinishReason::Abort,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Other("none".into()),
    };
    let weight_version = match &meta["weight_version"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    };
    Ok(GenerateOutput {
        token_ids,
        logprobs: Some(logprobs),
        finish_reason,
        weight_version,
    })
}

impl_token_generator!(SglangGenerator, "sglang", "/generate", parse_generate);
