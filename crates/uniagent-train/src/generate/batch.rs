//! Batched generation with a KV cache: the synchronous core of the engine.

use std::sync::atomic::{AtomicU64, Ordering};

use tch::{Kind, Tensor};
use uniagent_core::{
    Error, FinishReason, GenerateOutput, GenerateRequest, LengthLimitKind, Result,
};

use super::sampler::sample_token;
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

/// Which rows nobody waits for, and the count of sampled tokens.
struct Stop<'a> {
    cancelled: &'a dyn Fn(usize) -> bool,
    sampled: &'a AtomicU64,
}

struct Row {
    budget: usize,
    rng: fastrand::Rng,
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    finish: Option<FinishReason>,
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
    let context = model.config().max_position_embeddings;
    let mut rows: Vec<Row> = requests
        .iter()
        .map(|r| Row {
            budget: r.max_new_tokens.min(context - r.prompt_ids.len()),
            rng: r
                .sampling
                .seed
                .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            finish: (r.max_new_tokens == 0).then_some(FinishReason::Length),
        })
        .collect();
    let mut active: Vec<usize> = (0..requests.len())
        .filter(|&i| rows[i].finish.is_none())
        .collect();
    if !active.is_empty() {
        let stop = Stop { cancelled, sampled };
        tch::no_grad(|| decode(model, requests, &mut rows, &mut active, kind, &stop))?;
    }
    Ok(rows
        .into_iter()
        .map(|row| GenerateOutput {
            token_ids: row.tokens,
            logprobs: Some(row.logprobs),
            finish_reason: row.finish.unwrap_or(FinishReason::Length),
            weight_version,
        })
        .collect())
}

fn decode(
    model: &Qwen2ForCausalLM,
    requests: &[GenerateRequest],
    rows: &mut [Row],
    active: &mut Vec<usize>,
    kind: LogprobKind,
    stop: &Stop<'_>,
) -> Result<()> {
    let device = model.device();
    let width = active
        .iter()
        .map(|&i| requests[i].prompt_ids.len())
        .max()
        .unwrap_or(1);
    let mut ids = Vec::with_capacity(active.len() * width);
    let mut mask = Vec::with_capacity(active.len() * width);
    let mut positions = Vec::with_capacity(active.len() * width);
    let mut next_pos = Vec::with_capacity(active.len());
    for &i in active.iter() {
        let prompt = &requests[i].prompt_ids;
        let pad = width - prompt.len();
        ids.extend(std::iter::repeat_n(0i64, pad).chain(prompt.iter().map(|&t| i64::from(t))));
        mask.extend(std::iter::repeat_n(0i64, pad).chain(std::iter::repeat_n(1, prompt.len())));
        positions.extend(std::iter::repeat_n(0i64, pad).chain(0..prompt.len() as i64));
        next_pos.push(prompt.len() as i64);
    }
    let shape = [active.len() as i64, width as i64];
    let mut input = Tensor::from_slice(&ids).view(shape).to_device(device);
    let mut attention = Tensor::from_slice(&mask).view(shape).to_device(device);
    let mut position = Tensor::from_slice(&positions).view(shape).to_device(device);
    let mut cache = model.new_cache();
    let vocab = model.config().vocab_size;
    loop {
        let hidden =
            model.hidden_states(&input, Some(&position), Some(&attention), Some(&mut cache))?;
        let last = hidden.select(1, -1);
        let logits = model
            .logits(&last)
            .to_kind(Kind::Float)
            .to_device(tch::Device::Cpu)
            .contiguous();
        let flat: Vec<f32> =
            Vec::try_from(logits.view([-1])).map_err(crate::model::tch_error("reading logits"))?;
        let mut keep = Vec::with_capacity(active.len());
        let mut next_ids = Vec::with_capacity(active.len());
        for (slot, &i) in active.iter().enumerate() {
            let row = &mut rows[i];
            let request = &requests[i];
            let sampled = sample_token(
                &flat[slot * vocab..(slot + 1) * vocab],
                &request.sampling,
                &mut row.rng,
            );
            row.tokens.push(sampled.token);
            stop.sampled.fetch_add(1, Ordering::Relaxed);
            row.logprobs.push(match kind {
                LogprobKind::Raw => sampled.logprob,
                LogprobKind::Processed => sampled.processed_logprob,
            });
            if request.stop_token_ids.contains(&sampled.token) {
                row.finish = Some(FinishReason::Stop);
            } else if row.tokens.len() >= row.budget || (stop.cancelled)(i) {
                row.finish = Some(FinishReason::Length);
            } else {
                keep.push(slot as i64);
                next_ids.push(i64::from(sampled.token));
            }
        }
        if keep.len() < active.len() {
            let kept: Vec<usize> = keep.iter().map(|&s| active[s as usize]).collect();
            if kept.is_empty() {
                *active = kept;
                return Ok(());
            }
            let index = Tensor::from_slice(&keep).to_device(device);
            cache.select_rows(&index);
            attention = attention.index_select(0, &index);
            next_pos = keep.iter().map(|&s| next_pos[s as usize]).collect();
            *active = kept;
        }
        let n = active.len() as i64;
        input = Tensor::from_slice(&next_ids).view([n, 1]).to_device(device);
        position = Tensor::from_slice(&next_pos).view([n, 1]).to_device(device);
        attention = Tensor::cat(
            &[
                &attention,
                &Tensor::ones([n, 1], (attention.kind(), device)),
            ],
            1,
        );
        for p in &mut next_pos {
            *p += 1;
        }
    }
}
