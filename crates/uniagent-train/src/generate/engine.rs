//! [`TchEngine`]: a [`TokenGenerator`] that batches concurrent requests on one model.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use uniagent_core::{Error, GenerateOutput, GenerateRequest, Result, TokenGenerator};

use super::batch::{generate_batch_with, validate_request, LogprobKind};
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
    queue: mpsc::UnboundedSender<Job>,
    model: Arc<Mutex<Qwen2ForCausalLM>>,
    version: Arc<AtomicU64>,
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
        let worker_model = Arc::clone(&model);
        let worker_version = Arc::clone(&version);
        let max_batch = config.max_batch_size.max(1);
        let kind = config.logprobs;
        std::thread::spawn(move || run_worker(jobs, worker_model, worker_version, max_batch, kind));
        Self {
            queue,
            model,
            version,
        }
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

fn run_worker(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    model: Arc<Mutex<Qwen2ForCausalLM>>,
    version: Arc<AtomicU64>,
    max_batch: usize,
    kind: LogprobKind,
) {
    while let Some(first) = jobs.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let Ok(model) = model.lock() else {
            for job in batch {
                let _ = job
                    .reply
                    .send(Err(Error::internal("engine model lock poisoned")));
            }
            continue;
        };
        let mut valid = Vec::with_capacity(batch.len());
        for job in batch {
            match validate_request(&model, &job.request) {
                Ok(()) => valid.push(job),
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                }
            }
        }
        if valid.is_empty() {
            continue;
        }
        let requests: Vec<GenerateRequest> = valid.iter().map(|j| j.request.clone()).collect();
        let current = Some(version.load(Ordering::SeqCst));
        match generate_batch_with(&model, &requests, current, kind) {
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
            .send(Job { request, reply })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}
