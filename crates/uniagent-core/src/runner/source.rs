//! [`RolloutSource`]: where an evaluation or a training phase gets its trajectories.

use std::sync::Arc;

use async_trait::async_trait;

use crate::agent::Trajectory;
use crate::codec::Codec;
use crate::error::Result;
use crate::generator::TokenGenerator;
use crate::task::Task;

/// Produces the trajectories of a phase with a given token generator.
///
/// Two sources exist: our own loop (`uniagent_train::pipeline::RolloutSpec`, over
/// [`Runner`](super::Runner)) and a black-box agent harness driven through the gateway
/// (`uniagent_gateway::harness::HarnessRollouts`). A trainer holds an
/// `Arc<dyn RolloutSource>`, so switching from one to the other is a configuration change.
///
/// ```
/// use std::sync::Arc;
/// use uniagent_core::agent::{ExitReason, Trajectory};
/// use uniagent_core::codec::Codec;
/// use uniagent_core::runner::{RolloutPhase, RolloutSource};
/// use uniagent_core::{Result, TokenGenerator};
///
/// /// A source whose every rollout fails before it starts (a dead backend, say).
/// #[derive(Debug)]
/// struct Unavailable(Arc<Codec>);
///
/// #[async_trait::async_trait]
/// impl RolloutSource for Unavailable {
///     fn codec(&self) -> &Arc<Codec> {
///         &self.0
///     }
///     async fn run(&self, _generator: Arc<dyn TokenGenerator>, phase: RolloutPhase) -> Result<Vec<Trajectory>> {
///         let mut out = Vec::new();
///         for task in &phase.tasks {
///             for sample in 0..phase.samples {
///                 let why = Some("no backend".to_owned());
///                 out.push(Trajectory::empty(&task.id, sample, task.messages.clone(), ExitReason::ModelError, why));
///             }
///         }
///         Ok(out)
///     }
/// }
/// ```
#[async_trait]
pub trait RolloutSource: Send + Sync + std::fmt::Debug {
    /// The policy's tokenizer and chat template, which the trajectories' ids are encoded with.
    fn codec(&self) -> &Arc<Codec>;

    /// Runs `phase` with `generator`; returns the trajectories sorted by id. One rollout's
    /// failure is that trajectory's exit reason, never an error of the whole call; an error
    /// means the phase cannot run at all (bad configuration).
    async fn run(
        &self,
        generator: Arc<dyn TokenGenerator>,
        phase: RolloutPhase,
    ) -> Result<Vec<Trajectory>>;
}

/// What one call of [`RolloutSource::run`] rolls out: every task `samples` times (at least
/// once) at `temperature` (0: greedy), at most `concurrency` rollouts at once.
///
/// ```
/// use uniagent_core::runner::RolloutPhase;
/// use uniagent_core::{Message, Task};
///
/// let tasks = vec![Task::new("t", vec![Message::user("hi")])];
/// let eval = RolloutPhase::greedy(tasks.clone(), 8);
/// assert_eq!((eval.samples, eval.temperature), (1, 0.0));
/// let rl = RolloutPhase::sampled(tasks, 0, 1.0, 8);
/// assert_eq!(rl.samples, 1, "at least one sample per task");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RolloutPhase {
    /// The tasks, each run `samples` times.
    pub tasks: Vec<Task>,
    /// Rollouts per task (at least 1).
    pub samples: u32,
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
    /// Rollouts at once (at least 1).
    pub concurrency: usize,
    /// The `phase` label of its metrics: `eval` for [`RolloutPhase::greedy`], `train` for
    /// [`RolloutPhase::sampled`].
    pub label: &'static str,
}

impl RolloutPhase {
    /// Each task once, greedily (evaluations and demonstrations).
    pub fn greedy(tasks: Vec<Task>, concurrency: usize) -> Self {
        Self {
            label: "eval",
            ..Self::sampled(tasks, 1, 0.0, concurrency)
        }
    }

    /// Each task `samples` times at `temperature` (an RL group per task); `samples` and
    /// `concurrency` are raised to at least 1.
    pub fn sampled(tasks: Vec<Task>, samples: u32, temperature: f64, concurrency: usize) -> Self {
        Self {
            tasks,
            samples: samples.max(1),
            temperature,
            concurrency: concurrency.max(1),
            label: "train",
        }
    }
}

#[async_trait]
impl<T: RolloutSource + ?Sized> RolloutSource for Arc<T> {
    fn codec(&self) -> &Arc<Codec> {
        (**self).codec()
    }
    async fn run(
        &self,
        generator: Arc<dyn TokenGenerator>,
        phase: RolloutPhase,
    ) -> Result<Vec<Trajectory>> {
        (**self).run(generator, phase).await
    }
}
