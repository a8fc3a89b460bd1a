//! Batched generation with a KV cache: the synchronous core of the engine.

use std::sync::atomic::{AtomicU64, Ordering};

use uniagent_core::{Error, GenerateOutput, GenerateRequest, LengthLimitKind, Result};

use super::decode::DecodeBatch;
use crate::model::Qwen2ForCausalLM;

/// Checks one request against the model before it joins a batch.
pub(crate) fn validate_request(model: &Qwen2ForCausalLM, request: &GenerateRequest) -> Result<()> {
    request.sampling.validate()?;
    if request.prompt_ids.is_empty() {
        return Err(Error::invalid_input("prompt_ids must not be empty"));
    }
    let vocab = model.config().vocab_size;
    if let Some(bad) = request.prompt_ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(Error::invalid_input(format!(
            "prompt id {bad} is outside the vocabulary of {vocab}"
        )));
    }
    let context = model.config().max_position_embeddings;
    if request.prompt_ids.len() >= context {
        return Err(Error::LengthLimit {
            limit: LengthLimitKind::MaxModelLen,
            needed: request.prompt_ids.len() + 1,
            allowed: context,
        });
    }
    Ok(())
}

/// Which log-probability an engine reports per sampled token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogprobKind {
    /// Under the model's unmodified distribution (temperature 1, no truncation): vLLM's
    /// `raw_logprobs`, comparable with a recompute at temperature 1.
    #[default]
    Raw,
    /// Under the distribution the token was drawn from (temperature, top-k, top-p): vLLM's
    /// `processed_logprobs`, the behaviour policy of rollout correction, comparable with a
    /// recompute at the rollout temperature.
    Processed,
}

/// Generates continuations for all `requests` together (left-padded prefill, then one token
/// per step for the rows still running; finished rows leave the KV cache).
///
/// Each row has its own random generator, seeded with `sampling.seed` (or a fresh seed), so a
/// seeded request gives the same tokens whatever it is batched with, up to float rounding of
/// padded batches. Requests must have passed validation (empty prompts are rejected).
pub fn generate_batch(
    model: &Qwen2ForCausalLM,
    requests: &[GenerateRequest],
    weight_version: Option<u64>,
) -> Result<Vec<GenerateOutput>> {
    generate_batch_with(model, requests, weight_version, LogprobKind::Raw)
}

/// [`generate_batch`] reporting the logprobs of `kind`.
pub fn generate_batch_with(
    model: &Qwen2ForCausalLM,
    requests: &[GenerateRequest],
    weight_version: Option<u64>,
    kind: LogprobKind,
) -> Result<Vec<GenerateOutput>> {
    let sampled = AtomicU64::new(0);
    generate_batch_cancellable(model, requests, weight_version, kind, &|_| false, &sampled)
}

/// [`generate_batch_with`], leaving out of the batch, after the step that samples their next
/// token, the rows whose request `cancelled(i)` says nobody waits for any more (a client that
/// disconnected): they stop costing forward passes at once. A cancelled row's output holds
/// what it sampled until then, with `finish_reason` `length`. Every sampled token is counted
/// in `sampled` as it is sampled.
pub(crate) fn generate_batch_cancellable(
    model: &Qwen2ForCausalLM,
    requests: &[GenerateRequest],
    weight_version: Option<u64>,
    kind: LogprobKind,
    cancelled: &dyn Fn(usize) -> bool,
    sampled: &AtomicU64,
) -> Result<Vec<GenerateOutput>> {
    for request in requests {
        validate_request(model, request)?;
    }
    let mut outputs: Vec<Option<GenerateOutput>> = vec![None; requests.len()];
    let mut batch = DecodeBatch::new(kind);
    let before = batch.tokens_sampled();
    let tagged = requests.iter().cloned().enumerate().collect();
    let mut done = batch.admit(model, tagged, weight_version, &|i| cancelled(*i))?;
    sampled.fetch_add(batch.tokens_sampled() - before, Ordering::Relaxed);
    while !batch.is_empty() {
        let before = batch.tokens_sampled();
        done.extend(batch.step(model, &|i| cancelled(*i))?);
        sampled.fetch_add(batch.tokens_sampled() - before, Ordering::Relaxed);
    }
    for (i, output) in done {
        outputs[i] = Some(output);
    }
    outputs
        .into_iter()
        .map(|o| o.ok_or_else(|| Error::internal("a batch row ended without an output")))
        .collect()
}
