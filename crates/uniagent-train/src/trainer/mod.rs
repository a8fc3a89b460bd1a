//! The trainer: a verl-faithful RL step (GRPO/GSPO/PPO losses from [`crate::rl`], a frozen
//! reference for KL, micro-batched gradient accumulation, AdamW with weight-decay groups,
//! grad-norm clipping, warmup + constant/cosine schedule), SFT as a mode of the same step, and
//! safetensors checkpoints that transformers loads.

mod batch;
mod config;
mod logprob;
mod optim;
mod schedule;
mod step;

pub use batch::TrainBatch;
pub use config::{
    KlLossConfig, OldLogProbSource, OptimConfig, RlObjective, TrainMode, TrainerConfig,
};
pub use schedule::{LrSchedule, ScheduleKind};
pub use step::{StepMetrics, Trainer};
