//! [`Pipeline`]: demonstrations → SFT → held-out evaluation → RL (sync or fully async) →
//! export, with the records on disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use uniagent_core::layer::With;
use uniagent_core::runner::RolloutSource;
use uniagent_core::{Error, Result, Task, TokenGenerator};

use super::checkpoint::{self, RunCheckpoint};
use super::config::{parse_device, Mode, PipelineConfig};
use super::metrics::{Records, Summary};
use super::rollout::Seeding;
use super::tasks::TaskSource;
use super::weight_sync::WeightSync;
use crate::generate::{EngineConfig, LogprobKind, TchEngine};
use crate::model::Qwen2ForCausalLM;

mod evaluate;
mod rl;

pub use evaluate::Evaluation;
pub use rl::RlOutcome;

/// Runs CPU-heavy work (forward/backward passes) without stalling the runtime's other tasks
/// when the runtime has several workers.
pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The training pipeline over one Qwen2 policy, its generation side (the in-process engine, or
/// any generator with a [`WeightSync`] that brings it the weights: [`Self::with_generation`])
/// and a rollout side (a [`RolloutSource`]: our loop as [`super::RolloutSpec`], or a black-box
/// harness through the gateway). Needs a tokio runtime; with a multi-threaded one,
/// training steps leave the other workers free for rollouts.
pub struct Pipeline {
    pub(super) config: PipelineConfig,
    pub(super) spec: Arc<dyn RolloutSource>,
    pub(super) policy: Option<Qwen2ForCausalLM>,
    pub(super) engine: Option<Arc<TchEngine>>,
    generator: Arc<dyn TokenGenerator>,
    /// Brings the trained weights to `generator`.
    pub(super) sync: Arc<dyn WeightSync>,
    /// Weights staged (after SFT) that the generator does not use yet.
    pub(super) sync_pending: bool,
    out: PathBuf,
    records: Records,
    pub(super) sft_losses: Vec<f64>,
    pub(super) sft_probes: Vec<(usize, f64)>,
    /// The checkpoint a resumed pipeline continues from (taken by the RL phase).
    resume: Option<RunCheckpoint>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("config", &self.config)
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline training `policy` on the environment of `spec`, writing to `out`
    /// (`trajectories.jsonl`, `metrics.jsonl`, `summary.json`, `learning_curve.png`, and run
    /// checkpoints under `checkpoints/`). Starts afresh: records and checkpoints of an earlier
    /// run in `out` are replaced (see [`Self::resume`] to continue one instead).
    /// Seeds torch and fixes its thread count from `config`.
    pub fn new(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        out: &Path,
    ) -> Result<Self> {
        config.validate()?;
        checkpoint::clear(out)?;
        let records = Records::create(out)?;
        Self::build(policy, spec, config, out, records, None)
    }

    /// Continues a run from `from`, a checkpoint of its output folder
    /// ([`Self::latest_checkpoint`]): the policy's weights, the optimizer, the RL step, the
    /// task cursor and the generator's weight version are restored, the records are cut back
    /// to what the checkpoint saw, and [`Self::run`] (or [`Self::rl`]) goes on with the next
    /// RL step, skipping SFT and the first evaluation.
    /// `policy` must have the architecture of the checkpointed one; `config` must equal the
    /// run's, except `rl.steps`, which may grow. A sync run resumed this way gives the metrics
    /// of an uninterrupted one: every random choice is derived from the seed and the data
    /// (shuffling from the epoch, sampling from the session), none from a global generator.
    /// An async run restarts its rollout workers at the saved cursor: groups that were in
    /// flight are not trained on.
    ///
    /// ```no_run
    /// # use uniagent_train::pipeline::{Pipeline, PipelineConfig, RolloutSpec};
    /// # fn demo(policy: uniagent_train::model::Qwen2ForCausalLM, spec: RolloutSpec,
    /// #         config: PipelineConfig) -> uniagent_core::Result<()> {
    /// let out = std::path::Path::new("runs/a");
    /// let pipeline = match Pipeline::latest_checkpoint(out)? {
    ///     Some(checkpoint) => Pipeline::resume(policy, spec, config, checkpoint)?,
    ///     None => Pipeline::new(policy, spec, config, out)?,
    /// };
    /// # Ok(()) }
    /// ```
    pub fn resume(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        from: RunCheckpoint,
    ) -> Result<Self> {
        config.validate()?;
        checkpoint::check_compatible(&from.state, &config)?;
        policy.load_weights(&from.dir)?;
        let records = Records::reopen(&from.out, from.state.records)?;
        let out = from.out.clone();
        let mut pipeline = Self::build(policy, spec, config, &out, records, None)?;
        if let Some(engine) = &pipeline.engine {
            engine.set_weight_version(from.state.weight_version);
        }
        pipeline.sft_losses = from.state.sft_losses.clone();
        pipeline.sft_probes = from.state.sft_probes.clone();
        tracing::info!(step = from.state.step, dir = %from.dir.display(), "resuming");
        pipeline.resume = Some(from);
        Ok(pipeline)
    }

    /// The latest complete checkpoint of the run in `out`, if it holds one.
    pub fn latest_checkpoint(out: &Path) -> Result<Option<RunCheckpoint>> {
        checkpoint::latest(out)
    }

    /// The RL step of the latest checkpoint in `out`, if it holds one.
    pub fn checkpoint_step(out: &Path) -> Result<Option<usize>> {
        Ok(Self::latest_checkpoint(out)?.map(|cp| cp.step()))
    }

    /// The pipeline over `records`: generation by the in-process engine, or by `external`
    /// (a generator and the sync that brings it the trained weights).
    fn build(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        out: &Path,
        records: Records,
        external: Option<(Arc<dyn TokenGenerator>, Arc<dyn WeightSync>)>,
    ) -> Result<Self> {
        tch::set_num_threads(config.torch_threads as i32);
        tch::manual_seed(config.seed as i64);
        let (engine, generator, sync) = match external {
            Some((generator, sync)) => (None, generator, sync),
            None => {
                let copy = match &config.generation_device {
                    Some(name) => {
                        let device = parse_device(name)?;
                        if device != policy.device() && !device_available(device) {
                            return Err(Error::config(format!(
                                "generation_device `{name}`: libtorch sees no such device"
                            )));
                        }
                        policy.try_clone_to(device)?
                    }
                    None => policy.try_clone()?,
                };
                let engine = Arc::new(TchEngine::new(
                    copy,
                    EngineConfig {
                        max_batch_size: config.engine_batch,
                        logprobs: if config.rl.correction.is_disabled() {
                            LogprobKind::Raw
                        } else {
                            LogprobKind::Processed
                        },
                        // A fixed schedule trains on the same bits only if the engine's
                        // logprobs do not depend on the clock-made decode batches.
                        batch_invariant_logprobs: matches!(config.rl.mode, Mode::Async)
                            && config.rl.r#async.deterministic,
                    },
                ));
                let generator: Arc<dyn TokenGenerator> = engine.clone();
                let sync: Arc<dyn WeightSync> = engine.clone();
                (Some(engine), generator, sync)
            }
        };
        Ok(Self {
            records,
            out: out.to_path_buf(),
            // Requests seeded from the run's seed, then (benchmarks only) held to the emulated
            // device's time.
            generator: generator
                .with(&Seeding(config.seed))
                .with(&config.generation_emulation),
            config,
            spec: Arc::new(spec),
            policy: Some(policy),
            engine,
            sync,
            sync_pending: false,
            sft_losses: Vec::new(),
            sft_probes: Vec::new(),
            resume: None,
        })
    }

    /// A pipeline as [`Self::new`] whose rollouts come from `generator` (e.g. an SGLang or
    /// vLLM server), which `sync` brings the trained weights to (e.g. `HttpWeightSync`, feature
    /// `http-sync`). Requests get seeds as with the in-process engine. The generator's
    /// logprobs must be those the run compares with: processed at the rollout temperature
    /// when `rl.correction` is set, raw otherwise. Run checkpoints are written as with
    /// [`Self::new`]; [`Self::resume`] continues them with the in-process engine.
    pub fn with_generation(
        policy: Qwen2ForCausalLM,
        spec: impl RolloutSource + 'static,
        config: PipelineConfig,
        out: &Path,
        generator: Arc<dyn TokenGenerator>,
        sync: Arc<dyn WeightSync>,
    ) -> Result<Self> {
        config.validate()?;
        checkpoint::clear(out)?;
        let records = Records::create(out)?;
        Self::build(policy, spec, config, out, records, Some((generator, sync)))
    }

    /// The policy (between phases).
    pub fn policy(&self) -> Result<&Qwen2ForCausalLM> {
        self.policy
            .as_ref()
            .ok_or_else(|| Error::internal("the policy is inside a failed phase"))
    }

    /// The in-process generation engine holding the rollout weights (`None` with
    /// [`Self::with_generation`]).
    pub fn engine(&self) -> Option<&Arc<TchEngine>> {
        self.engine.as_ref()
    }

    /// What brings the trained weights to the generator.
    pub fn weight_sync(&self) -> &Arc<dyn WeightSync> {
        &self.sync
    }

    /// The seeded generator the rollouts use.
    pub fn generator(&self) -> Arc<dyn TokenGenerator> {
        self.generator.clone()
    }

    pub(super) fn take_policy(&mut self) -> Result<Qwen2ForCausalLM> {
        self.policy
            .take()
            .ok_or_else(|| Error::internal("the policy is inside a failed phase"))
    }

    /// The whole run: demonstrations of `sft_tasks` by `demonstrator`, SFT, held-out
    /// evaluation, RL on `source`, the learning curve and `summary.json`. The policy is
    /// exported with [`Self::export`].
    pub async fn run(
        &mut self,
        demonstrator: Arc<dyn TokenGenerator>,
        sft_tasks: Vec<Task>,
        source: TaskSource,
        held_out: &[Task],
    ) -> Result<Summary> {
        let started = Instant::now();
        let resumed = self.resume.as_ref().map(|cp| cp.state.before);
        let before = match resumed {
            Some(Some(before)) => before,
            Some(None) => {
                return Err(Error::invalid_input(
                    "the checkpoint was written by Pipeline::rl without a held-out evaluation before RL: resume it with Pipeline::rl",
                ))
            }
            None => self.sft_and_evaluate(demonstrator, sft_tasks, &source, held_out).await?,
        };
        let rl = if self.config.rl.steps > 0 {
            self.rl_phase(source, held_out, Some(before)).await?
        } else {
            RlOutcome::default()
        };
        let mut curve = vec![(0, before.success)];
        curve.extend(&rl.curve);
        let mut reward_curve = vec![(0, before.reward)];
        reward_curve.extend(&rl.reward_curve);
        let train: Vec<(usize, f64)> = rl.steps.iter().map(|s| (s.step, s.success_rate)).collect();
        super::plot::plot_learning_curve(
            &self.out.join("learning_curve.png"),
            &curve,
            &train,
            self.config.rl.steps,
        )?;
        let after = curve.last().map_or(before.success, |c| c.1);
        let summary = Summary {
            mode: self.config.rl.mode,
            pipeline: self.config.rl.r#async,
            loss: self.config.rl.loss_mode,
            held_out_tasks: held_out.len(),
            seed: self.config.seed,
            sft_only_success: before.success,
            rl_success: after,
            sft_only_reward: before.reward,
            rl_reward: reward_curve.last().map_or(before.reward, |c| c.1),
            improvement_points: (after - before.success) * 100.0,
            sft_final_nll: self.sft_losses.last().copied(),
            sft_steps: self.sft_losses.len(),
            sft_probes: self.sft_probes.clone(),
            curve,
            reward_curve,
            trainer_idle_ratio: rl.trainer_idle_ratio,
            rollout_idle_ratio: rl.rollout_idle_ratio,
            rl_wall_s: rl.wall_s,
            wall_s: started.elapsed().as_secs_f64(),
        };
        let text =
            serde_json::to_string_pretty(&summary).map_err(|e| Error::internal(e.to_string()))?;
        std::fs::write(self.out.join("summary.json"), text)
            .map_err(|e| Error::io("writing summary.json".to_owned(), e))?;
        Ok(summary)
    }

    /// Writes the policy as a Hugging Face folder (see [`super::export_hf`]), with the
    /// codec's end-of-turn token as `eos_token_id` and the tokenizer files of
    /// `tokenizer_dir`.
    pub fn export(&self, dir: &Path, tokenizer_dir: Option<&Path>) -> Result<()> {
        super::artifacts::export_hf(
            self.policy()?,
            self.spec.codec().eos_token_id(),
            tokenizer_dir,
            dir,
        )
    }
}

/// Whether libtorch can place tensors on `device` (a CUDA index below the GPU count).
fn device_available(device: tch::Device) -> bool {
    match device {
        tch::Device::Cpu => true,
        tch::Device::Cuda(i) => i < tch::Cuda::device_count().max(0) as usize,
        _ => false,
    }
}
