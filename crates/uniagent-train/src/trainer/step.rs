//! [`Trainer`]: one optimizer step over a mini-batch of trajectories.

use std::path::Path;

use tch::{Kind, Tensor};
use uniagent_core::{Error, Result};

use super::batch::{rl_error, PaddedBatch, TrainBatch};
use super::config::{OldLogProbSource, RlObjective, TrainMode, TrainerConfig};
use super::logprob::{response_logits, token_logprobs};
use super::optim::AdamW;
use crate::model::{tch_error, Qwen2ForCausalLM};
use crate::rl::{
    agg_loss, entropy_from_logits, kl_penalty, policy_loss, rollout_correction, CorrectionMetrics,
    GlobalBatchInfo, LossAggMode, LossInputs, RolloutCorrection,
};

/// What one step measured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepMetrics {
    /// The mini-batch loss (sum of the micro-batch losses, i.e. the loss of the whole batch).
    pub loss: f64,
    /// The policy-gradient part (RL) or the NLL (SFT).
    pub pg_loss: f64,
    /// The aggregated KL to the reference; `None` without a KL term (`use_kl_loss` off) and
    /// in SFT.
    pub kl: Option<f64>,
    /// The aggregated entropy of the policy over the response tokens, computed at every RL step
    /// whatever the entropy coefficient (as verl does: without gradients when the coefficient
    /// is 0, in the loss otherwise); `None` in SFT.
    pub entropy: Option<f64>,
    /// Token-weighted mean of the loss's `pg_clipfrac` over micro-batches.
    pub pg_clipfrac: f64,
    /// Gradient L2 norm before clipping (0 from [`Trainer::accumulate_gradients`]).
    pub grad_norm: f64,
    /// Learning rate used by this step.
    pub lr: f64,
    /// Mask-1 response tokens in the batch (after rollout-correction rejection).
    pub tokens: i64,
    /// What rollout correction did; `None` without it.
    pub correction: Option<CorrectionMetrics>,
}

/// A GRPO/GSPO/PPO (or SFT) trainer over a [`Qwen2ForCausalLM`] policy.
///
/// Each [`step`](Self::step): pads the batch, recomputes `old_log_prob` (or takes the rollout's),
/// then for every micro-batch recomputes log-probs with gradients, builds verl's loss with the
/// whole mini-batch's normalisers ([`GlobalBatchInfo::for_mini_batch`]) and back-propagates it,
/// so the accumulated gradient equals that of one full-batch pass; then clips the gradient norm
/// and takes an AdamW step (no weight decay on norms and biases) at the scheduled rate.
///
/// ```no_run
/// use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};
/// use uniagent_train::trainer::{TrainBatch, Trainer, TrainerConfig, TrainMode};
/// # fn demo(rows: Vec<uniagent_core::AgentLoopOutput>) -> uniagent_core::Result<()> {
/// let policy = Qwen2ForCausalLM::load("tiny-qwen2".as_ref(), tch::Device::Cpu, ModelDtype::F32)?;
/// let config = TrainerConfig { mode: TrainMode::Sft, ..TrainerConfig::default() };
/// let mut trainer = Trainer::new(policy, None, config)?;
/// let metrics = trainer.step(&TrainBatch::sft(rows))?;
/// trainer.save_checkpoint("ckpt/step-1".as_ref())?;
/// # Ok(()) }
/// ```
pub struct Trainer {
    correction: RolloutCorrection,
    policy: Qwen2ForCausalLM,
    reference: Option<Qwen2ForCausalLM>,
    optimizer: AdamW,
    config: TrainerConfig,
    steps_done: u64,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("config", &self.config)
            .field("steps_done", &self.steps_done)
            .finish()
    }
}

impl Trainer {
    /// A trainer for `policy`. `reference` (frozen here) is required when the objective has a
    /// KL term.
    pub fn new(
        policy: Qwen2ForCausalLM,
        reference: Option<Qwen2ForCausalLM>,
        config: TrainerConfig,
    ) -> Result<Self> {
        if let TrainMode::Rl(RlObjective { kl: Some(_), .. }) = config.mode {
            if reference.is_none() {
                return Err(Error::invalid_input("a KL loss needs a reference policy"));
            }
        }
        if config.micro_batch_size == 0 || config.temperature.is_nan() || config.temperature <= 0.0
        {
            return Err(Error::invalid_input(
                "micro_batch_size must be >= 1 and temperature > 0",
            ));
        }
        let reference = reference.map(|mut r| {
            r.var_store_mut().freeze();
            r
        });
        let optimizer = AdamW::new(
            config.optim,
            config.optim.lr * config.optim.schedule.multiplier(0),
        );
        Ok(Self {
            correction: RolloutCorrection::default(),
            policy,
            reference,
            optimizer,
            config,
            steps_done: 0,
        })
    }

    /// The policy being trained.
    pub fn policy(&self) -> &Qwen2ForCausalLM {
        &self.policy
    }

    /// Decoupled PPO with rollout correction: the recomputed `old_log_prob` is the proximal
    /// policy (the clip is taken around it), the rows' `response_logprobs` are the behaviour
    /// policy, and `correction`'s importance weights multiply each token's loss while its
    /// rejection criteria drop tokens or sequences from the mask (verl's
    /// `rollout_corr`). Needs `old_log_prob = recompute`, and the rollout logprobs must be those
    /// of the sampling distribution at the trainer's temperature (the engine's
    /// [`LogprobKind::Processed`](crate::generate::LogprobKind)).
    pub fn with_rollout_correction(mut self, correction: RolloutCorrection) -> Self {
        self.correction = correction;
        self
    }

    /// Ends training and hands the policy back (the optimizer state is dropped).
    pub fn into_policy(self) -> Qwen2ForCausalLM {
        self.policy
    }

    /// Optimizer steps taken.
    pub fn steps_done(&self) -> u64 {
        self.steps_done
    }

    /// The learning rate of the next step.
    pub fn current_lr(&self) -> f64 {
        self.config.optim.lr * self.config.optim.schedule.multiplier(self.steps_done)
    }

    /// One optimizer step on `batch` (one mini-batch).
    pub fn step(&mut self, batch: &TrainBatch) -> Result<StepMetrics> {
        let mut metrics = self.accumulate_gradients(batch)?;
        metrics.grad_norm = self.clip_gradients();
        metrics.lr = self.current_lr();
        self.optimizer.set_lr(metrics.lr);
        self.optimizer.step(self.policy.var_store());
        AdamW::zero_grad(self.policy.var_store());
        self.steps_done += 1;
        Ok(metrics)
    }

    /// Zeroes the gradients and accumulates those of `batch` over its micro-batches, without
    /// stepping (exposed so that gradients can be inspected).
    pub fn accumulate_gradients(&mut self, batch: &TrainBatch) -> Result<StepMetrics> {
        AdamW::zero_grad(self.policy.var_store());
        let correcting = self.check_batch(batch)?;
        let vocab = self.policy.config().vocab_size;
        let mut padded = PaddedBatch::new(
            &batch.rows,
            batch.advantages.as_deref(),
            vocab,
            self.policy.device(),
        )?;
        let temperature = self.config.temperature;
        let (old, weights, correction) = self.old_logprobs_and_weights(&mut padded, correcting)?;
        let info = GlobalBatchInfo::for_mini_batch(&padded.response_mask).map_err(rl_error)?;
        let tokens = info.batch_num_tokens.unwrap_or(0);
        let reference = match (&self.reference, self.config.mode) {
            (Some(r), TrainMode::Rl(RlObjective { kl: Some(_), .. })) => {
                Some(self.no_grad_logprobs(r, &padded)?)
            }
            _ => None,
        };
        let mut m = StepMetrics {
            tokens,
            correction,
            ..StepMetrics::default()
        };
        let micro = self.config.micro_batch_size as i64;
        let mut start = 0;
        while start < padded.rows() {
            let len = micro.min(padded.rows() - start);
            let mb = padded.slice(start, len);
            let logits = response_logits(&self.policy, &mb, temperature)?;
            let logp = token_logprobs(&logits, &mb.response_ids);
            let loss = match self.config.mode {
                TrainMode::Sft => {
                    let nll = agg_loss(
                        &logp.neg(),
                        &mb.response_mask,
                        LossAggMode::TokenMean,
                        &info,
                    )
                    .map_err(rl_error)?;
                    m.pg_loss += nll.double_value(&[]);
                    nll
                }
                TrainMode::Rl(objective) => {
                    let slice = |t: &Option<Tensor>| t.as_ref().map(|t| t.narrow(0, start, len));
                    let old_mb = slice(&old).unwrap_or_else(|| logp.detach());
                    let weights_mb = slice(&weights);
                    let inputs = LossInputs::new(&old_mb, &logp, &mb.advantages, &mb.response_mask)
                        .weighted(weights_mb.as_ref());
                    let out = policy_loss(
                        objective.loss_mode,
                        inputs,
                        &objective.clip,
                        objective.agg,
                        &info,
                    )
                    .map_err(rl_error)?;
                    let mb_tokens = mb.response_mask.sum(Kind::Float).double_value(&[]);
                    m.pg_clipfrac += out.pg_clipfrac * mb_tokens / (tokens.max(1) as f64);
                    m.pg_loss += out.loss.double_value(&[]);
                    let mut loss = out.loss;
                    if let (Some(kl), Some(ref_mb)) = (objective.kl, slice(&reference)) {
                        let per_token =
                            kl_penalty(&logp, &ref_mb, kl.estimator).map_err(rl_error)?;
                        let kl_loss = agg_loss(&per_token, &mb.response_mask, objective.agg, &info)
                            .map_err(rl_error)?;
                        *m.kl.get_or_insert(0.0) += kl_loss.double_value(&[]);
                        loss += kl_loss * kl.coef;
                    }
                    // Always measured (a collapse shows here first); in the graph only when it
                    // is part of the loss.
                    let with_grad = objective.entropy_coeff != 0.0;
                    let ent =
                        entropy_term(&logits, &mb.response_mask, objective.agg, &info, with_grad)?;
                    *m.entropy.get_or_insert(0.0) += ent.double_value(&[]);
                    if with_grad {
                        loss -= ent * objective.entropy_coeff;
                    }
                    loss
                }
            };
            m.loss += loss.double_value(&[]);
            loss.f_backward().map_err(tch_error("backward"))?;
            start += len;
        }
        Ok(m)
    }

    /// Checks that `batch` has what the configured objective needs; returns whether rollout
    /// correction applies.
    fn check_batch(&self, batch: &TrainBatch) -> Result<bool> {
        if matches!(self.config.mode, TrainMode::Rl(_))
            && self.config.old_log_prob == OldLogProbSource::Rollout
        {
            if let Some(i) = batch
                .rows
                .iter()
                .position(|r| r.response_logprobs.is_none())
            {
                return Err(Error::invalid_input(format!(
                    "row {i} has no response_logprobs, which old_log_prob = rollout needs"
                )));
            }
        }
        let correcting =
            matches!(self.config.mode, TrainMode::Rl(_)) && !self.correction.is_disabled();
        if correcting {
            if self.config.old_log_prob != OldLogProbSource::Recompute {
                return Err(Error::invalid_input(
                    "rollout correction needs old_log_prob = recompute (the proximal policy)",
                ));
            }
            if let Some(i) = batch
                .rows
                .iter()
                .position(|r| r.response_logprobs.is_none())
            {
                return Err(Error::invalid_input(format!(
                    "row {i} has no response_logprobs, which rollout correction needs"
                )));
            }
        }
        Ok(correcting)
    }

    /// The proximal policy's log-probs (`old_log_prob`: recomputed, or the rollout's) and, with
    /// rollout correction, the importance weights; the correction may also mask rejected tokens
    /// in `padded`.
    fn old_logprobs_and_weights(
        &self,
        padded: &mut PaddedBatch,
        correcting: bool,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<CorrectionMetrics>)> {
        let old = match (self.config.mode, self.config.old_log_prob) {
            (TrainMode::Rl(_), OldLogProbSource::Recompute) => {
                Some(self.no_grad_logprobs(&self.policy, padded)?)
            }
            (TrainMode::Rl(_), OldLogProbSource::Rollout) => {
                Some(padded.rollout_logprobs.shallow_clone())
            }
            (TrainMode::Sft, _) => None,
        };
        let mut correction = None;
        let weights = match (&old, correcting) {
            (Some(old), true) => {
                let (w, mask, metrics) = rollout_correction(
                    old,
                    &padded.rollout_logprobs,
                    &padded.response_mask,
                    &self.correction,
                )
                .map_err(rl_error)?;
                padded.response_mask = mask;
                correction = Some(metrics);
                w
            }
            _ => None,
        };
        Ok((old, weights, correction))
    }

    /// Log-probs of the batch's response tokens under `model`, without gradients, micro-batched.
    fn no_grad_logprobs(&self, model: &Qwen2ForCausalLM, padded: &PaddedBatch) -> Result<Tensor> {
        let micro = self.config.micro_batch_size as i64;
        let mut parts = Vec::new();
        let mut start = 0;
        while start < padded.rows() {
            let len = micro.min(padded.rows() - start);
            let mb = padded.slice(start, len);
            let lp = tch::no_grad(|| {
                response_logits(model, &mb, self.config.temperature)
                    .map(|l| token_logprobs(&l, &mb.response_ids))
            })?;
            parts.push(lp);
            start += len;
        }
        Ok(Tensor::cat(&parts, 0))
    }

    /// Global L2 norm of the gradients; scales them to `max_grad_norm` when above it (the
    /// `torch.nn.utils.clip_grad_norm_` rule: coefficient `max / (norm + 1e-6)`, capped at 1).
    pub fn clip_gradients(&self) -> f64 {
        let grads: Vec<Tensor> = self
            .policy
            .var_store()
            .trainable_variables()
            .iter()
            .map(|v| v.grad())
            .filter(|g| g.defined())
            .collect();
        if grads.is_empty() {
            return 0.0;
        }
        let norm = tch::no_grad(|| {
            let squares: Vec<Tensor> = grads
                .iter()
                .map(|g| g.to_kind(Kind::Float).pow_tensor_scalar(2).sum(Kind::Float))
                .collect();
            Tensor::stack(&squares, 0)
                .sum(Kind::Float)
                .sqrt()
                .double_value(&[])
        });
        if let Some(max) = self.config.optim.max_grad_norm {
            let coef = max / (norm + 1e-6);
            if coef < 1.0 {
                tch::no_grad(|| {
                    for mut g in grads {
                        let _ = g.g_mul_scalar_(coef);
                    }
                });
            }
        }
        norm
    }

    /// The gradients accumulated so far, by parameter name (for tests and diagnostics).
    pub fn gradients(&self) -> Vec<(String, Tensor)> {
        let mut out: Vec<(String, Tensor)> = self
            .policy
            .var_store()
            .variables()
            .into_iter()
            .map(|(name, v)| (name, v.grad()))
            .filter(|(_, g)| g.defined())
            .map(|(name, g)| (name, g.detach().copy()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Writes the policy as a Hugging Face checkpoint (`config.json` + `model.safetensors`),
    /// the optimizer's moments (`optimizer.safetensors`) and `trainer_state.json` (steps done,
    /// next learning rate): everything [`Self::resume_from`] needs to continue exactly.
    pub fn save_checkpoint(&self, dir: &Path) -> Result<()> {
        self.policy.save_pretrained(dir)?;
        self.optimizer.save(&dir.join(OPTIMIZER_FILE))?;
        let state =
            serde_json::json!({ "steps_done": self.steps_done, "next_lr": self.current_lr() });
        let path = dir.join(TRAINER_STATE_FILE);
        std::fs::write(&path, state.to_string())
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))
    }

    /// Continues from a checkpoint of [`Self::save_checkpoint`]: the policy's weights, the
    /// optimizer's moments and the step count (so the schedule goes on where it stopped).
    pub fn resume_from(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join(TRAINER_STATE_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let state: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::invalid_input(format!("{}: {e}", path.display())))?;
        let steps_done = state["steps_done"].as_u64().ok_or_else(|| {
            Error::invalid_input(format!("{}: no integer `steps_done`", path.display()))
        })?;
        self.policy.load_weights(dir)?;
        self.optimizer
            .load(&dir.join(OPTIMIZER_FILE), self.policy.var_store())?;
        self.steps_done = steps_done;
        self.optimizer.set_lr(self.current_lr());
        Ok(())
    }
}

/// The aggregated entropy of `logits` over `mask` (verl's `entropy_from_logits` then
/// `agg_loss`); with `with_grad` false it is computed without building a graph (verl's
/// `torch.no_grad()` when `entropy_coeff` is 0), so measuring it costs no backward work.
fn entropy_term(
    logits: &Tensor,
    mask: &Tensor,
    agg: LossAggMode,
    info: &GlobalBatchInfo,
    with_grad: bool,
) -> Result<Tensor> {
    let compute = |logits: &Tensor| -> Result<Tensor> {
        let entropy = entropy_from_logits(logits).map_err(rl_error)?;
        agg_loss(&entropy, mask, agg, info).map_err(rl_error)
    };
    match with_grad {
        true => compute(logits),
        false => tch::no_grad(|| compute(&logits.detach())),
    }
}

/// The optimizer's moments in a trainer checkpoint.
const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// Steps done and the next learning rate in a trainer checkpoint.
const TRAINER_STATE_FILE: &str = "trainer_state.json";
