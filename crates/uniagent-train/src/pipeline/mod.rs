//! Training as a library: an SFT phase and an RL phase (sync, or fully async with verl's
//! `fully_async` semantics) over your tasks, environment and reward, with metrics, a learning
//! curve and a Hugging Face export.
//!
//! - The rollout side is [`RolloutSpec`]: exactly what `uniagent_core::runner::Runner` takes
//!   (tools, a reward, a `LoopConfig`, a `SandboxFactory`) plus the policy's codec; every
//!   phase runs the same loop that evaluates an agent.
//! - The data side is a [`TaskSource`] (epochs, seeded shuffling, a cursor to resume from).
//! - The trainer side is [`Pipeline`], configured by [`PipelineConfig`] (serde, YAML or TOML,
//!   unknown keys rejected, losses and modes as enums).
//! - What is trained on is decided once, by `Trajectory::training_use`: infrastructure
//!   failures leave the batch and their group's baseline, failures the agent could cause train
//!   with reward 0.
//! - Staleness comes from the data: every sampled token carries the weight version that
//!   produced it (`AgentLoopOutput::weight_versions`).
//!
//! Outputs in the run folder: `trajectories.jsonl` (every trajectory, tagged with `phase` and
//! `step`), `metrics.jsonl` (one [`StepRecord`] per RL step; also logged through `tracing`),
//! `summary.json` ([`Summary`]) and `learning_curve.png`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use uniagent_core::agent::LoopConfig;
//! use uniagent_core::codec::Codec;
//! use uniagent_core::runner::RolloutParts;
//! use uniagent_core::{Deployment, RewardSpec, Task, Tool};
//! use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};
//! use uniagent_train::pipeline::{Demonstrator, Pipeline, PipelineConfig, RolloutSpec, TaskSource};
//!
//! # async fn demo(
//! #     tools: Vec<Arc<dyn Tool>>,
//! #     reward: Arc<dyn RewardSpec>,
//! #     new_sandbox: fn(&Task) -> uniagent_core::Result<Box<dyn Deployment>>,
//! #     sft_tasks: Vec<Task>, rl_tasks: Vec<Task>, held_out: Vec<Task>,
//! # ) -> uniagent_core::Result<()> {
//! let dir = std::path::Path::new("my-qwen2");
//! let codec = Arc::new(Codec::from_dir(dir)?);
//! let policy = Qwen2ForCausalLM::load(dir, tch::Device::Cpu, ModelDtype::F32)?;
//! let spec = RolloutSpec {
//!     parts: RolloutParts::new(tools)
//!         .with_reward(reward)
//!         .with_sandboxes(Arc::new(new_sandbox)),
//!     loop_config: LoopConfig::default(),
//!     codec: codec.clone(),
//!     progress: None,
//!     environment: "my-tasks".into(),
//! };
//! let config = PipelineConfig::from_yaml_str("rl:\n  mode: async\n  steps: 20\n")?;
//! let seed = config.seed;
//! let mut pipeline = Pipeline::new(policy, spec, config, "runs/a".as_ref())?;
//! // Demonstrations: what a correct agent writes at each turn of a task.
//! let demonstrator = Arc::new(Demonstrator::new(codec, |_task, turn| {
//!     (turn == 0).then(|| "<tool_call>...</tool_call>".to_owned())
//! }));
//! let summary = pipeline
//!     .run(demonstrator, sft_tasks, TaskSource::new(rl_tasks, seed), &held_out)
//!     .await?;
//! println!("held-out success {} -> {}", summary.sft_only_success, summary.rl_success);
//! pipeline.export("runs/a/policy".as_ref(), Some(dir))?;
//! # Ok(()) }
//! ```

mod artifacts;
mod checkpoint;
mod config;
mod diagnostics;
mod emulation;
#[cfg(feature = "http-sync")]
mod http_sync;
mod metrics;
mod plot;
mod rollout;
mod rollouter;
mod run;
mod sft;
mod tasks;
mod weight_sync;

pub use artifacts::export_hf;
pub use checkpoint::RunCheckpoint;
pub use config::{
    parse_device, AsyncConfig, CheckpointConfig, Mode, PipelineConfig, RlConfig, SftConfig,
    SftTarget,
};
pub use diagnostics::{
    mixed_groups, ratio_stats, sample_staleness, staleness_histogram, RatioStats, SampleStaleness,
};
pub use emulation::{EmulatedDevice, GenerationEmulation};
#[cfg(feature = "http-sync")]
pub use http_sync::{HttpSyncConfig, HttpWeightSync, ServerFlavour};
pub use metrics::{ScheduledGroup, StepRecord, Summary};
pub use plot::plot_learning_curve;
pub use rollout::{Demonstrator, RolloutProgress, RolloutSpec, Script, Seeded, Seeding};
pub use run::{Evaluation, Pipeline, RlOutcome};
pub use sft::SftOutcome;
pub use tasks::{TaskCursor, TaskSource};
/// The rollout side of a phase (re-exported: [`RolloutSpec`] is ours, a harness source is
/// `uniagent_gateway::harness::HarnessRollouts`).
pub use uniagent_core::runner::{RolloutPhase, RolloutSource};
pub use uniagent_core::sandbox::SetupSandbox;
pub use weight_sync::WeightSync;
