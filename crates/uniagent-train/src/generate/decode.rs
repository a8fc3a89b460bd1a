//! [`DecodeBatch`]: a batch that requests join between decoding steps and leave as they end
//! (continuous batching at the step level).

use tch::{Kind, Tensor};
use uniagent_core::{Error, FinishReason, GenerateOutput, GenerateRequest, Result};

use super::batch::LogprobKind;
use super::sampler::{sample_token, score_token};
use crate::model::{KvCache, Qwen2ForCausalLM};

/// One request being decoded.
struct Running<T> {
    tag: T,
    sampling: uniagent_core::SamplingParams,
    stop_token_ids: Vec<u32>,
    budget: usize,
    rng: fastrand::Rng,
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    weight_version: Option<u64>,
    prompt_len: usize,
    /// The prompt, kept only to rescore the row alone when it ends (batch-invariant
    /// logprobs); empty otherwise.
    prompt: Vec<u32>,
}

impl<T> Running<T> {
    fn finish(self, reason: FinishReason) -> (T, GenerateOutput) {
        let output = GenerateOutput {
            token_ids: self.tokens,
            logprobs: Some(self.logprobs),
            finish_reason: reason,
            weight_version: self.weight_version,
        };
        (self.tag, output)
    }
}

/// The rows of a batch with the KV cache they share: row `i` of the cache and of the mask is
/// `rows[i]`, and every row's pending token (its last sampled one) is fed at the next step.
struct State<T> {
    rows: Vec<Running<T>>,
    cache: KvCache,
    /// `[rows, cached positions]` int64: 1 for a real position, 0 for left padding.
    mask: Tensor,
}

/// Requests [`DecodeBatch::admit`] could not prefill: the error, and every request's tag so
/// that its caller can be told.
#[derive(Debug)]
pub struct Rejected<T> {
    /// Why the prefill failed.
    pub error: Error,
    /// The tags of all the requests of the call, in order.
    pub tags: Vec<T>,
}

impl<T> From<Rejected<T>> for Error {
    /// The error alone (the callers behind the tags are told elsewhere, or are gone).
    fn from(rejected: Rejected<T>) -> Self {
        rejected.error
    }
}

/// A batch of generations that new requests can join between steps.
///
/// [`admit`](Self::admit) prefills new prompts (together, left-padded) and samples their first
/// token; [`step`](Self::step) decodes one token for every running row. A row leaves the
/// batch, with its output returned at once, when it samples a stop id, spends its budget, or
/// its caller is gone; so a short request admitted while a long one runs is answered after its
/// own tokens, not after the long one's. Joining rows are lined up with the running ones by
/// left padding (masked out), and positions that no remaining row uses are dropped when rows
/// leave, so the cache is as wide as the longest running row.
///
/// Each row samples with its own generator (seeded by `sampling.seed`), so a seeded request
/// gives the same tokens whenever it joins and whatever it runs beside, up to float rounding of
/// padded batches. The logprobs carry that rounding too, unless
/// [`batch_invariant_logprobs`](Self::batch_invariant_logprobs) is on: then each row's
/// logprobs are recomputed, when it ends, by a forward pass of its sequence alone, so they are
/// the same bits whatever it was decoded beside.
///
/// ```no_run
/// # fn demo(model: &uniagent_train::model::Qwen2ForCausalLM) -> uniagent_core::Result<()> {
/// use uniagent_core::{GenerateRequest, SamplingParams};
/// use uniagent_train::generate::{DecodeBatch, LogprobKind};
/// let mut batch = DecodeBatch::new(LogprobKind::Raw);
/// let long = GenerateRequest::new(vec![9707, 1879], SamplingParams::greedy(), 256);
/// let mut done = batch.admit(model, vec![("long", long)], None, &|_| false)?;
/// done.extend(batch.step(model, &|_| false)?);
/// // A short request joins the running batch and leaves it first.
/// let short = GenerateRequest::new(vec![9707], SamplingParams::greedy(), 2);
/// done.extend(batch.admit(model, vec![("short", short)], None, &|_| false)?);
/// while !batch.is_empty() {
///     done.extend(batch.step(model, &|_| false)?);
/// }
/// assert_eq!(done.iter().map(|(tag, _)| *tag).collect::<Vec<_>>(), ["short", "long"]);
/// # Ok(()) }
/// ```
pub struct DecodeBatch<T> {
    kind: LogprobKind,
    state: Option<State<T>>,
    sampled: u64,
    /// Rescore each row alone when it ends.
    rescore: bool,
    /// Rows that ended in a step whose rescoring failed: their callers are told through
    /// [`abandon`](Self::abandon).
    orphans: Vec<T>,
}

impl<T> std::fmt::Debug for DecodeBatch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeBatch")
            .field("rows", &self.len())
            .field("width", &self.width())
            .field("tokens_sampled", &self.sampled)
            .finish()
    }
}

impl<T> DecodeBatch<T> {
    /// An empty batch reporting logprobs of `kind`.
    pub fn new(kind: LogprobKind) -> Self {
        Self {
            kind,
            state: None,
            sampled: 0,
            rescore: false,
            orphans: Vec::new(),
        }
    }

    /// Makes the reported logprobs independent of batching: when a row ends, its logprobs are
    /// recomputed by one forward pass over its prompt and tokens alone (batch of one, no
    /// padding, no cache) and scored with [`score_token`](super::score_token). The cost is one
    /// prefill-sized pass per request. The sampled tokens are still drawn from the batched
    /// logits; in the rare case where the lone pass puts a drawn token outside the truncated
    /// set (a top-p boundary within rounding), that token keeps the logprob it was drawn with.
    ///
    /// What it is for: a run whose schedule is fixed (`rl.async.deterministic`) and whose loss
    /// reads the engine's logprobs (rollout correction) trains on the same bits whatever the
    /// clock made of the decode batches.
    pub fn batch_invariant_logprobs(mut self, on: bool) -> Self {
        self.rescore = on;
        self
    }

    /// Rows being decoded.
    pub fn len(&self) -> usize {
        self.state.as_ref().map_or(0, |s| s.rows.len())
    }

    /// True when no row is being decoded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cached positions per row, padding included.
    pub fn width(&self) -> usize {
        self.state.as_ref().map_or(0, |s| s.cache.len())
    }

    /// Tokens sampled by this batch so far (every row's, those that left included).
    pub fn tokens_sampled(&self) -> u64 {
        self.sampled
    }

    /// Removes every running row, returning their tags (after a failed pass, whose callers
    /// must be told), with those of rows that ended in a step whose rescoring failed.
    pub fn abandon(&mut self) -> Vec<T> {
        let mut tags = std::mem::take(&mut self.orphans);
        if let Some(state) = self.state.take() {
            tags.extend(state.rows.into_iter().map(|r| r.tag));
        }
        tags
    }

    /// Prefills `requests` (validated against `model`) together and samples their first
    /// token; rows that are already done (a zero budget, a stop id, a budget of one, a caller
    /// gone per `cancelled`) are returned, the others join the running batch. Outputs report
    /// `weight_version`.
    ///
    /// Errors: a failed prefill (or rescoring), with the tags of all of `requests` (none
    /// joined); the running rows are left as they were.
    pub fn admit(
        &mut self,
        model: &Qwen2ForCausalLM,
        requests: Vec<(T, GenerateRequest)>,
        weight_version: Option<u64>,
        cancelled: &dyn Fn(&T) -> bool,
    ) -> std::result::Result<Vec<(T, GenerateOutput)>, Rejected<T>> {
        let context = model.config().max_position_embeddings;
        let mut done = Vec::new();
        let mut joining = Vec::with_capacity(requests.len());
        let mut prompts = Vec::with_capacity(requests.len());
        for (tag, request) in requests {
            let row = Running {
                tag,
                budget: request
                    .max_new_tokens
                    .min(context.saturating_sub(request.prompt_ids.len())),
                rng: request
                    .sampling
                    .seed
                    .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed),
                sampling: request.sampling,
                stop_token_ids: request.stop_token_ids,
                tokens: Vec::new(),
                logprobs: Vec::new(),
                weight_version,
                prompt_len: request.prompt_ids.len(),
                prompt: if self.rescore {
                    request.prompt_ids.clone()
                } else {
                    Vec::new()
                },
            };
            if request.max_new_tokens == 0 {
                // Nothing sampled, nothing to rescore.
                done.push(row.finish(FinishReason::Length));
            } else {
                joining.push(row);
                prompts.push(request.prompt_ids);
            }
        }
        if joining.is_empty() {
            return Ok(done);
        }
        let device = model.device();
        let width = prompts.iter().map(Vec::len).max().unwrap_or(1);
        let mut ids = Vec::with_capacity(prompts.len() * width);
        let mut mask = Vec::with_capacity(prompts.len() * width);
        let mut positions = Vec::with_capacity(prompts.len() * width);
        for prompt in &prompts {
            let pad = width - prompt.len();
            ids.extend(std::iter::repeat_n(0i64, pad).chain(prompt.iter().map(|&t| i64::from(t))));
            mask.extend(std::iter::repeat_n(0i64, pad).chain(std::iter::repeat_n(1, prompt.len())));
            positions.extend(std::iter::repeat_n(0i64, pad).chain(0..prompt.len() as i64));
        }
        let shape = [prompts.len() as i64, width as i64];
        let input = Tensor::from_slice(&ids).view(shape).to_device(device);
        let mask = Tensor::from_slice(&mask).view(shape).to_device(device);
        let positions = Tensor::from_slice(&positions).view(shape).to_device(device);
        let mut cache = model.new_cache();
        let prefilled = tch::no_grad(|| {
            let hidden =
                model.hidden_states(&input, Some(&positions), Some(&mask), Some(&mut cache))?;
            last_logits(model, &hidden)
        });
        let flat = match prefilled {
            Ok(flat) => flat,
            Err(error) => {
                let tags = done
                    .into_iter()
                    .map(|(tag, _)| tag)
                    .chain(joining.into_iter().map(|r| r.tag))
                    .collect();
                return Err(Rejected { error, tags });
            }
        };
        let mut fresh = State {
            rows: joining,
            cache,
            mask,
        };
        let ended = self.sample(&mut fresh, &flat, model, cancelled);
        match self.finish(model, ended) {
            Ok(finished) => done.extend(finished),
            Err((error, ended)) => {
                let tags = done
                    .into_iter()
                    .map(|(tag, _)| tag)
                    .chain(ended)
                    .chain(fresh.rows.into_iter().map(|r| r.tag))
                    .collect();
                return Err(Rejected { error, tags });
            }
        }
        if fresh.rows.is_empty() {
            return Ok(done);
        }
        self.state = Some(match self.state.take() {
            None => fresh,
            Some(running) => join(running, fresh),
        });
        Ok(done)
    }

    /// Decodes one token for every running row; returns the rows that ended with it.
    ///
    /// Errors: a failed forward pass (or rescoring); the batch's rows are then in an unknown
    /// state and should be [`abandon`](Self::abandon)ed.
    pub fn step(
        &mut self,
        model: &Qwen2ForCausalLM,
        cancelled: &dyn Fn(&T) -> bool,
    ) -> Result<Vec<(T, GenerateOutput)>> {
        let Some(mut state) = self.state.take() else {
            return Ok(Vec::new());
        };
        let device = model.device();
        let n = state.rows.len() as i64;
        let next: Vec<i64> = state
            .rows
            .iter()
            .map(|r| r.tokens.last().map_or(0, |&t| i64::from(t)))
            .collect();
        // The pending token (the last sampled) sits right after the prompt and the tokens
        // before it.
        let positions: Vec<i64> = state
            .rows
            .iter()
            .map(|r| (r.prompt_len + r.tokens.len() - 1) as i64)
            .collect();
        let input = Tensor::from_slice(&next).view([n, 1]).to_device(device);
        let positions = Tensor::from_slice(&positions)
            .view([n, 1])
            .to_device(device);
        let mask = Tensor::cat(
            &[
                &state.mask,
                &Tensor::ones([n, 1], (state.mask.kind(), device)),
            ],
            1,
        );
        let flat = tch::no_grad(|| {
            let hidden = model.hidden_states(
                &input,
                Some(&positions),
                Some(&mask),
                Some(&mut state.cache),
            )?;
            last_logits(model, &hidden)
        })?;
        state.mask = mask;
        let ended = self.sample(&mut state, &flat, model, cancelled);
        if !state.rows.is_empty() {
            self.state = Some(state);
        }
        self.finish(model, ended).map_err(|(error, tags)| {
            self.orphans.extend(tags);
            error
        })
    }

    /// The outputs of the rows that ended, rescored alone first when that is on. Errors: a
    /// failed rescoring, with the tags of every row that ended.
    #[allow(clippy::type_complexity)]
    fn finish(
        &self,
        model: &Qwen2ForCausalLM,
        mut ended: Vec<(Running<T>, FinishReason)>,
    ) -> std::result::Result<Vec<(T, GenerateOutput)>, (Error, Vec<T>)> {
        if self.rescore {
            let failed = ended
                .iter_mut()
                .map(|(row, _)| rescore(model, row, self.kind))
                .find_map(Result::err);
            if let Some(error) = failed {
                return Err((error, ended.into_iter().map(|(row, _)| row.tag).collect()));
            }
        }
        Ok(ended
            .into_iter()
            .map(|(row, why)| row.finish(why))
            .collect())
    }

    /// Samples every row's next token from `flat` (`[rows * vocab]` logits), removes the rows
    /// that end (returned with why), and trims padding no remaining row needs.
    fn sample(
        &mut self,
        state: &mut State<T>,
        flat: &[f32],
        model: &Qwen2ForCausalLM,
        cancelled: &dyn Fn(&T) -> bool,
    ) -> Vec<(Running<T>, FinishReason)> {
        let vocab = model.config().vocab_size;
        let mut keep = Vec::with_capacity(state.rows.len());
        let mut ended = Vec::new();
        for (slot, row) in state.rows.iter_mut().enumerate() {
            let logits = &flat[slot * vocab..(slot + 1) * vocab];
            let sampled = sample_token(logits, &row.sampling, &mut row.rng);
            self.sampled += 1;
            row.tokens.push(sampled.token);
            row.logprobs.push(match self.kind {
                LogprobKind::Raw => sampled.logprob,
                LogprobKind::Processed => sampled.processed_logprob,
            });
            if row.stop_token_ids.contains(&sampled.token) {
                ended.push((slot, FinishReason::Stop));
            } else if row.tokens.len() >= row.budget || cancelled(&row.tag) {
                ended.push((slot, FinishReason::Length));
            } else {
                keep.push(slot as i64);
            }
        }
        if ended.is_empty() {
            return Vec::new();
        }
        let mut reasons = ended.into_iter().peekable();
        let mut done = Vec::new();
        let mut kept = Vec::with_capacity(keep.len());
        for (slot, row) in std::mem::take(&mut state.rows).into_iter().enumerate() {
            match reasons.next_if(|(s, _)| *s == slot) {
                Some((_, reason)) => done.push((row, reason)),
                None => kept.push(row),
            }
        }
        state.rows = kept;
        if !state.rows.is_empty() {
            let index = Tensor::from_slice(&keep).to_device(state.mask.device());
            state.cache.select_rows(&index);
            state.mask = state.mask.index_select(0, &index);
            trim(state);
        }
        done
    }
}

/// Positions whose logits one rescoring step brings to the CPU at once (bounds the memory of a
/// long response over a large vocabulary).
const RESCORE_CHUNK: usize = 64;

/// Replaces `row`'s logprobs by those of a forward pass over its prompt and tokens alone.
fn rescore<T>(model: &Qwen2ForCausalLM, row: &mut Running<T>, kind: LogprobKind) -> Result<()> {
    let n = row.tokens.len();
    if n == 0 {
        return Ok(());
    }
    // The last sampled token predicts nothing that was kept: it is not fed.
    let ids: Vec<i64> = row
        .prompt
        .iter()
        .chain(&row.tokens[..n - 1])
        .map(|&t| i64::from(t))
        .collect();
    let input = Tensor::from_slice(&ids)
        .view([1, ids.len() as i64])
        .to_device(model.device());
    let vocab = model.config().vocab_size;
    // Position `prompt_len - 1 + i` predicts token `i`.
    let first = row.prompt.len() - 1;
    tch::no_grad(|| -> Result<()> {
        let hidden = model.hidden_states(&input, None, None, None)?;
        for start in (0..n).step_by(RESCORE_CHUNK) {
            let len = RESCORE_CHUNK.min(n - start);
            let logits = model
                .logits(&hidden.narrow(1, (first + start) as i64, len as i64))
                .to_kind(Kind::Float)
                .to_device(tch::Device::Cpu)
                .contiguous();
            let flat = Vec::<f32>::try_from(logits.view([-1]))
                .map_err(crate::model::tch_error("reading rescored logits"))?;
            for (j, logits) in flat.chunks_exact(vocab).enumerate() {
                let i = start + j;
                if let Some(scored) = score_token(logits, &row.sampling, row.tokens[i]) {
                    row.logprobs[i] = match kind {
                        LogprobKind::Raw => scored.logprob,
                        LogprobKind::Processed => scored.processed_logprob,
                    };
                }
            }
        }
        Ok(())
    })
}

/// The last position's logits of every row, as float32 on the CPU, flattened.
fn last_logits(model: &Qwen2ForCausalLM, hidden: &Tensor) -> Result<Vec<f32>> {
    let logits = model
        .logits(&hidden.select(1, -1))
        .to_kind(Kind::Float)
        .to_device(tch::Device::Cpu)
        .contiguous();
    Vec::try_from(logits.view([-1])).map_err(crate::model::tch_error("reading logits"))
}

/// The rows of `running` then those of `joining`, the narrower cache padded on the left.
fn join<T>(mut running: State<T>, mut joining: State<T>) -> State<T> {
    let (a, b) = (running.cache.len(), joining.cache.len());
    let width = a.max(b);
    for (state, len) in [(&mut running, a), (&mut joining, b)] {
        if len < width {
            state.cache.pad_left(width - len);
            let rows = state.mask.size()[0];
            let pad = Tensor::zeros(
                [rows, (width - len) as i64],
                (state.mask.kind(), state.mask.device()),
            );
            state.mask = Tensor::cat(&[&pad, &state.mask], 1);
        }
    }
    running.cache.append_rows(joining.cache);
    running.mask = Tensor::cat(&[&running.mask, &joining.mask], 0);
    running.rows.extend(joining.rows);
    running
}

/// Drops the leading positions that are padding in every row (left behind by a longer row
/// that ended).
fn trim<T>(state: &mut State<T>) {
    let used = state.mask.any_dim(0, false).to_kind(Kind::Int64);
    // argmax returns the first maximal index: the first position some row uses.
    let first = used.argmax(0, false).int64_value(&[]);
    if first > 0 {
        state.cache.drop_left(first as usize);
        let keep = state.mask.size()[1] - first;
        state.mask = state.mask.narrow(1, first, keep);
    }
}
