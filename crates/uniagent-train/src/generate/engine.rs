//! [`TchEngine`]: a [`TokenGenerator`] that batches concurrent requests on one model.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use uniagent_core::{Error, GenerateOutput, GenerateRequest, Result, TokenGenerator};

use super::batch::{validate_request, LogprobKind};
use super::decode::DecodeBatch;
use crate::model::Qwen2ForCausalLM;

/// Engine settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most requests decoded together in one batch.
    pub max_batch_size: usize,
    /// Which logprobs the outputs carry (raw by default).
    pub logprobs: LogprobKind,
    /// Recompute each request's logprobs alone when it ends, so they do not depend on what it
    /// was batched with (see [`DecodeBatch::batch_invariant_logprobs`]); off by default (it
    /// costs one prefill-sized pass per request).
    pub batch_invariant_logprobs: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_batch_size: 64,
            logprobs: LogprobKind::Raw,
            batch_invariant_logprobs: false,
        }
    }
}

struct Job {
    request: GenerateRequest,
    reply: oneshot::Sender<Result<GenerateOutput>>,
    /// When it was queued: its time to first token runs from here.
    queued: Instant,
}

/// The tch generation engine.
///
/// A background thread owns the decoding: every [`generate`](TokenGenerator::generate) call
/// queues its request, and the thread decodes all running requests together (up to
/// [`EngineConfig::max_batch_size`]), one token per step, so that concurrent rollouts share
/// forward passes. Scheduling is continuous at the step level (see [`DecodeBatch`]): requests
/// queued during a step join the batch before the next one, and each request is answered as
/// soon as it ends, so a short request is not held up by a long one.
///
/// Logprobs are those of the model's unmodified distribution (log-softmax of the raw logits,
/// before temperature, top-p and top-k), as vLLM reports by default (`raw_logprobs`): they are
/// directly comparable with the trainer's recomputed log-probs at temperature 1.
///
/// [`update_weights`](Self::update_weights) copies new parameters in between batches and bumps
/// the weight version reported with every output.
///
/// A request whose caller stops waiting (its `generate` future dropped: a client that
/// disconnected, a cancelled rollout) leaves the running batch after the next decoding step,
/// so it stops costing forward passes and holding up the requests queued behind the batch.
/// Dropping the engine ends its thread after the running step (waiting at most 10 s), so no
/// forward pass runs while the process tears libtorch down.
///
/// ```no_run
/// # async fn demo(model: uniagent_train::model::Qwen2ForCausalLM) -> uniagent_core::Result<()> {
/// use uniagent_core::{GenerateRequest, SamplingParams, TokenGenerator};
/// use uniagent_train::generate::{EngineConfig, TchEngine};
/// let engine = TchEngine::new(model, EngineConfig::default());
/// let out = engine.generate(GenerateRequest::new(vec![9707, 1879], SamplingParams::greedy(), 8)).await?;
/// // The tch engine always reports logprobs (one per sampled id).
/// assert_eq!(Some(out.token_ids.len()), out.logprobs.as_ref().map(Vec::len));
/// # Ok(()) }
/// ```
pub struct TchEngine {
    queue: Option<mpsc::UnboundedSender<Job>>,
    model: Arc<Mutex<Qwen2ForCausalLM>>,
    version: Arc<AtomicU64>,
    sampled: Arc<AtomicU64>,
    updates: Arc<AtomicUsize>,
    /// Closed when the decoding thread ends (behind a mutex: a receiver is not `Sync`).
    stopped: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

/// How long dropping the engine waits for its thread to finish the running step.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Drop for TchEngine {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop; its jobs' callers are gone by now, so the
        // running batch ends after its next step.
        self.queue = None;
        let stopped = match self.stopped.get_mut() {
            Ok(slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(stopped) = stopped {
            let _ = stopped.recv_timeout(STOP_WAIT);
        }
    }
}

impl std::fmt::Debug for TchEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TchEngine")
            .field("weight_version", &self.weight_version())
            .finish_non_exhaustive()
    }
}

impl TchEngine {
    /// Starts the engine's decoding thread with `model` at weight version 0.
    pub fn new(model: Qwen2ForCausalLM, config: EngineConfig) -> Self {
        let (queue, jobs) = mpsc::unbounded_channel();
        let model = Arc::new(Mutex::new(model));
        let version = Arc::new(AtomicU64::new(0));
        let sampled = Arc::new(AtomicU64::new(0));
        let updates = Arc::new(AtomicUsize::new(0));
        let (done, stopped) = std::sync::mpsc::channel::<()>();
        let worker = Worker {
            model: Arc::clone(&model),
            version: Arc::clone(&version),
            sampled: Arc::clone(&sampled),
            updates: Arc::clone(&updates),
            max_batch: config.max_batch_size.max(1),
            kind: config.logprobs,
            batch_invariant: config.batch_invariant_logprobs,
        };
        std::thread::spawn(move || {
            worker.run(jobs);
            drop(done);
        });
        Self {
            queue: Some(queue),
            model,
            version,
            sampled,
            updates,
            stopped: Mutex::new(Some(stopped)),
        }
    }

    /// Tokens sampled since the engine started, over all requests (those of cancelled
    /// requests included).
    pub fn tokens_sampled(&self) -> u64 {
        self.sampled.load(Ordering::SeqCst)
    }

    /// Weight updates waiting for the running requests to end (no request is admitted while
    /// one waits).
    pub fn updates_waiting(&self) -> usize {
        self.updates.load(Ordering::SeqCst)
    }

    /// The version reported with outputs generated from now on.
    pub fn weight_version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// Sets the version reported from now on, e.g. to continue the numbering of a resumed
    /// run whose weights were loaded from a checkpoint.
    pub fn set_weight_version(&self, version: u64) {
        self.version.store(version, Ordering::SeqCst);
    }

    /// Copies the parameters of `source` (same architecture) into the engine's model, waiting
    /// for the running requests to finish (queued ones are admitted after the update), and
    /// returns the new weight version.
    pub fn update_weights(&self, source: &Qwen2ForCausalLM) -> Result<u64> {
        self.with_model(|model| {
            model.copy_weights_from(source)?;
            Ok(self.version.fetch_add(1, Ordering::SeqCst) + 1)
        })
    }

    /// Runs `change` on the model once the running rows have ended, admitting no request
    /// until it is done (so no output mixes two weight versions).
    fn with_model<R>(&self, change: impl FnOnce(&mut Qwen2ForCausalLM) -> Result<R>) -> Result<R> {
        self.updates.fetch_add(1, Ordering::SeqCst);
        let result = match self.model.lock() {
            Ok(mut model) => change(&mut model),
            Err(_) => Err(Error::internal("engine model lock poisoned")),
        };
        self.updates.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// As [`update_weights`](Self::update_weights), but the outputs generated from now on
    /// report `version` (an inference server told the version by its trainer).
    pub fn update_weights_to(&self, source: &Qwen2ForCausalLM, version: u64) -> Result<()> {
        self.with_model(|model| {
            model.copy_weights_from(source)?;
            self.version.store(version, Ordering::SeqCst);
            Ok(())
        })
    }
}

/// What the decoding thread owns.
struct Worker {
    model: Arc<Mutex<Qwen2ForCausalLM>>,
    version: Arc<AtomicU64>,
    sampled: Arc<AtomicU64>,
    /// Weight updates waiting for the running rows to end: no request is admitted meanwhile.
    updates: Arc<AtomicUsize>,
    max_batch: usize,
    kind: LogprobKind,
    batch_invariant: bool,
}

/// How often a worker that let go of the model checks whether the weight updates are done.
const UPDATE_POLL: std::time::Duration = std::time::Duration::from_millis(1);

impl Worker {
    /// Serves jobs until the queue closes: a busy period starts with the first job, admits
    /// what is queued between decoding steps, and ends when no row runs. The model is held for
    /// the whole period, so every output reports the weights it was decoded with.
    fn run(self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        while let Some(first) = jobs.blocking_recv() {
            while self.updates.load(Ordering::SeqCst) > 0 {
                std::thread::sleep(UPDATE_POLL);
            }
            let Ok(model) = self.model.lock() else {
                let _ = first
                    .reply
                    .send(Err(Error::internal("engine model lock poisoned")));
                continue;
            };
            let mut batch =
                DecodeBatch::new(self.kind).batch_invariant_logprobs(self.batch_invariant);
            let mut waiting = vec![first];
            loop {
                // Admission between steps: queued jobs join while there is room and no weight
                // update waits.
                if self.updates.load(Ordering::SeqCst) == 0 {
                    while batch.len() + waiting.len() < self.max_batch {
                        match jobs.try_recv() {
                            Ok(job) => waiting.push(job),
                            Err(_) => break,
                        }
                    }
                    if !waiting.is_empty() {
                        self.admit(&model, &mut batch, std::mem::take(&mut waiting));
                    }
                }
                if batch.is_empty() {
                    break;
                }
                let before = batch.tokens_sampled();
                let stepped = batch.step(&model, &|reply: &Reply| reply.is_closed());
                self.sampled
                    .fetch_add(batch.tokens_sampled() - before, Ordering::SeqCst);
                match stepped {
                    Ok(done) => answer(done),
                    Err(e) => fail(batch.abandon(), &e),
                }
            }
        }
    }

    /// Validates `jobs` and prefills the valid ones into `batch`.
    fn admit(&self, model: &Qwen2ForCausalLM, batch: &mut DecodeBatch<Reply>, jobs: Vec<Job>) {
        let mut valid = Vec::with_capacity(jobs.len());
        let mut queued = Vec::with_capacity(jobs.len());
        for job in jobs {
            if job.reply.is_closed() {
                // Nobody waits for it any more.
                continue;
            }
            match validate_request(model, &job.request) {
                Ok(()) => {
                    queued.push(job.queued);
                    valid.push((job.reply, job.request));
                }
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                }
            }
        }
        if valid.is_empty() {
            return;
        }
        let version = Some(self.version.load(Ordering::SeqCst));
        let before = batch.tokens_sampled();
        let admitted = batch.admit(model, valid, version, &|reply: &Reply| reply.is_closed());
        self.sampled
            .fetch_add(batch.tokens_sampled() - before, Ordering::SeqCst);
        match admitted {
            Ok(done) => {
                // The prefill sampled every joining request's first token.
                for at in queued {
                    crate::telemetry::first_token(at.elapsed());
                }
                answer(done)
            }
            // The joining requests fail; the running ones go on.
            Err(rejected) => fail(rejected.tags, &rejected.error),
        }
    }
}

/// Where a job's output goes.
type Reply = oneshot::Sender<Result<GenerateOutput>>;

fn answer(done: Vec<(Reply, GenerateOutput)>) {
    for (reply, output) in done {
        let _ = reply.send(Ok(output));
    }
}

fn fail(replies: Vec<Reply>, error: &Error) {
    let message = error.to_string();
    for reply in replies {
        let _ = reply.send(Err(Error::Model {
            backend: "tch".into(),
            message: message.clone(),
            retryable: false,
            source: None,
        }));
    }
}

#[async_trait]
impl TokenGenerator for TchEngine {
    fn name(&self) -> &str {
        "tch"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let (reply, answer) = oneshot::channel();
        let gone = || Error::Model {
            backend: "tch".into(),
            message: "the engine's decoding thread has stopped".into(),
            retryable: false,
            source: None,
        };
        self.queue
            .as_ref()
            .ok_or_else(gone)?
            .send(Job {
                request,
                reply,
                queued: Instant::now(),
            })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}
