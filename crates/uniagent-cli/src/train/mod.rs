//! The library side of `uniagent train` (feature `tch`): the `trainer:` section and the call
//! into `uniagent_train::pipeline`. The command holds no training logic of its own: it splits
//! the run's tasks into demonstrated / trained / held-out, builds the policy, and hands the
//! same environment parts `run` uses (tools, reward, sandboxes, loop) to the pipeline.
//!
//! ```yaml
//! # ... the run's tasks, environment, model (type: tch), loop, runner ...
//! trainer:
//!   quick: false                       # true: the CI-sized run (12 RL steps)
//!   split: {sft_tasks: 96, eval_tasks: 64}
//!   scratch: {vocab_size: 400}         # the policy from scratch when model.dir is unset
//!   seed: 7                            # from here on: uniagent_train::pipeline::PipelineConfig
//!   sft: {steps: 150, batch_size: 16, lr: 3.0e-3}
//!   rl: {steps: 40, tasks_per_step: 8, lr: 5.0e-4, loss: grpo, mode: sync, eval_every: 5}
//! ```

mod run;
mod section;

pub use run::{split_tasks, train, Phases, TrainReport};
pub use section::{Scratch, Split, TrainerSection};
