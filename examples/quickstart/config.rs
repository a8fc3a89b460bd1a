//! Every knob of the quickstart, in one TOML file (`--config`), with a fixed seed.

use serde::{Deserialize, Serialize};

use crate::pipeline::AsyncKnobs;
use crate::policy::TinyModel;

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
    /// Tokenizer vocabulary size.
    pub vocab_size: usize,
    /// The from-scratch model.
    pub model: TinyModel,
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
            sft_steps: 120,
            sft_batch: 16,
            sft_lr: 3e-3,
            rl_steps: 20,
            rl_tasks_per_step: 8,
            group_size: 4,
            rl_lr: 1e-4,
            loss: "grpo".into(),
            temperature: 1.0,
            eval_tasks: 48,
            eval_every: 10,
            concurrency: 8,
            max_turn_tokens: 48,
            max_turns: 3,
            vocab_size: 400,
            model: TinyModel {
                hidden_size: 64,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                intermediate_size: 128,
            },
            mode: "sync".into(),
            pipeline: AsyncKnobs::default(),
        }
    }
}

impl QuickstartConfig {
    /// The `--quick` budget: fewer steps and tasks, the same pipeline.
    pub fn quick(mut self) -> Self {
        self.sft_tasks = 48;
        self.sft_steps = 25;
        self.rl_steps = 10;
        self.rl_tasks_per_step = 6;
        self.eval_tasks = 32;
        self.eval_every = 10;
        self
    }
}
