//! [`TchEngine`]: a [`TokenGenerator`] that batches concurrent requests on one model.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use uniagent_core::{Error, GenerateOutput, GenerateRequest, Result, TokenGenerator};

use super::batch::{generate_batch_cancellable, validate_request, LogprobKind};
use crate::model::Qwen2ForCausalLM;

/// Engine settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most requests decoded together in one batch.
    pub max_batch_size: usize,
    /// Which logprobs the outputs carry (raw by default).
    pub logprobs: LogprobKind,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_batch_size: 64,
            logprobs: LogprobKind::Raw,
        }
    }
}

struct Job {
    request: GenerateRequest,
    reply: oneshot::Sender<Result<GenerateOutput>>,
}

/// The tch generation engine.
///
/// A background thread owns the decoding: every [`generate`](TokenGenerator::generate) call
/// queues its request, and the thread takes everything queued (up to
/// [`EngineConfig::max_batch_size`]) as one batch, so that concurrent rollouts share forward
/// passes. Requests arriving while a batch runs form the next batch.
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
        let (done, stopped) = std::sync::mpsc::channel::<()>();
        let worker = Worker {
            model: Arc::clone(&model),
            version: Arc::clone(&version),
            sampled: Arc::clone(&sampled),
            max_batch: config.max_batch_size.max(1),
            kind: config.logprobs,
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
            stopped: Mutex::new(Some(stopped)),
        }
    }

    /// Tokens sampled since the engine started, over all requests (those of cancelled
    /// requests included).
    pub fn tokens_sampled(&self) -> u64 {
        self.sampled.load(Ordering::SeqCst)
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
    /// for the running batch to finish, and returns the new weight version.
    pub fn update_weights(&self, source: &Qwen2ForCausalLM) -> Result<u64> {
        let mut model = self
            .model
            .lock()
            .map_err(|_| Error::internal("engine model lock poisoned"))?;
        model.copy_weights_from(source)?;
        Ok(self.version.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// As [`update_weights`](Self::update_weights), but the outputs generated from now on
    /// report `version` (an inference server told the version by its trainer).
    pub fn update_weights_to(&self, source: &Qwen2ForCausalLM, version: u64) -> Result<()> {
        let mut model = self
            .model
            .lock()
            .map_err(|_| Error::internal("engine model lock poisoned"))?;
        model.copy_weights_from(source)?;
        self.version.store(version, Ordering::SeqCst);
        Ok(())
    }
}

/// What the decoding thread owns.
struct Worker {
    model: Arc<Mutex<Qwen2ForCausalLM>>,
    version: Arc<AtomicU64>,
    sampled: Arc<AtomicU64>,
    max_batch: usize,
    kind: LogprobKind,
}

impl Worker {
    fn run(self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        while let Some(first) = jobs.blocking_recv() {
            let mut batch = vec![first];
            while batch.len() < self.max_batch {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.serve(batch);
        }
    }

    fn serve(&self, batch: Vec<Job>) {
        let Ok(model) = self.model.lock() else {
            for job in batch {
                let _ = job
                    .reply
                    .send(Err(Error::internal("engine model lock poisoned")));
            }
            return;
        };
        let mut valid = Vec::with_capacity(batch.len());
        for job in batch {
            if job.reply.is_closed() {
                // Nobody waits for it any more.
                continue;
            }
            match validate_request(&model, &job.request) {
                Ok(()) => valid.push(job),
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                }
            }
        }
        if valid.is_empty() {
            return;
        }
        let requests: Vec<GenerateRequest> = valid.iter().map(|j| j.request.clone()).collect();
        let current = Some(self.version.load(Ordering::SeqCst));
        let cancelled = |i: usize| valid[i].reply.is_closed();
        let outputs = generate_batch_cancellable(
            &model,
            &requests,
            current,
            self.kind,
            &cancelled,
            &self.sampled,
        );
        match outputs {
            Ok(outputs) => {
                for (job, output) in valid.into_iter().zip(outputs) {
                    let _ = job.reply.send(Ok(output));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for job in valid {
                    let _ = job.reply.send(Err(Error::Model {
                        backend: "tch".into(),
                        message: message.clone(),
                        retryable: false,
                        source: None,
                    }));
                }
            }
        }
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
            .send(Job { request, reply })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}
