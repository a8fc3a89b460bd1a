//! Every knob of the quickstart, in one TOML file (`--config`), with a fixed seed.

use serde::{Deserialize, Serialize};

use crate::pipeline::AsyncKnobs;
use uniagent_train::scratch::TinyModel;

/// The run's configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuickstartConfig {
    /// Seed of task generation, initialisation and sampling.
    pub seed: u64,
    /// Tasks with demonstrations for the SFT warm start.
    pub sft_tasks: usize,
    /// SFT optimizer steps.
    pub sft_steps: usize,
    /// SFT rows per step.
    pub sft_batch: usize,
    /// SFT learning rate.
    pub sft_lr: f64,
    /// RL steps.
    pub rl_steps: usize,
    /// Tasks per RL step (each sampled `group_size` times).
    pub rl_tasks_per_step: usize,
    /// GRPO group size.
    pub group_size: u32,
    /// RL learning rate.
    pub rl_lr: f64,
    /// `grpo` (vanilla PPO loss) or `gspo`.
    pub loss: String,
    /// Rollout temperature during RL.
    pub temperature: f64,
    /// Held-out tasks evaluated (greedy).
    pub eval_tasks: usize,
    /// Evaluate every this many RL steps (and at the end).
    pub eval_every: usize,
    /// Rollouts (host sandboxes) at once.
    pub concurrency: usize,
    /// Tokens per assistant turn.
    pub max_turn_tokens: u32,
    /// Turns per episode.
    pub max_turns: u32,
    /// Files (names with codes) in each task's sandbox; one of them is asked about.
    pub files_per_task: usize,
    /// Tokenizer vocabulary size.
    pub vocab_size: usize,
    /// The from-scratch model.
    pub model: TinyModel,
    /// libtorch intra-op threads (fixed, so that a seed gives the same numbers).
    pub torch_threads: usize,
    /// Most requests the generation engine decodes together.
    pub engine_batch: usize,
    /// `sync` (rollout, then train, then sync weights) or `async` (concurrent rollouter).
    pub mode: String,
    /// The async pipeline's knobs (verl's names).
    pub pipeline: AsyncKnobs,
}

impl Default for QuickstartConfig {
    fn default() -> Self {
        Self {
            seed: 7,
            sft_tasks: 96,
            sft_steps: 150,
            sft_batch: 16,
            sft_lr: 3e-3,
            rl_steps: 40,
            rl_tasks_per_step: 8,
            group_size: 8,
            rl_lr: 5e-4,
            loss: "grpo".into(),
            temperature: 0.5,
            eval_tasks: 64,
            eval_every: 5,
            concurrency: 8,
            max_turn_tokens: 48,
            max_turns: 3,
            files_per_task: 3,
            vocab_size: 400,
            model: TinyModel {
                hidden_size: 64,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                intermediate_size: 128,
            },
            torch_threads: 1,
            engine_batch: 64,
            mode: "sync".into(),
            pipeline: AsyncKnobs::default(),
        }
    }
}

impl QuickstartConfig {
    /// The `--quick` budget: fewer RL steps, the same warm start, pipeline and held-out tasks.
    pub fn quick(mut self) -> Self {
        self.rl_steps = 12;
        self.eval_every = 6;
        self
    }
}
