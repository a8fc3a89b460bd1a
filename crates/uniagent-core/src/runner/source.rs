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
/// use uniagent_core::runner::RolloutSource;
/// use uniagent_core::{Result, Task, TokenGenerator};
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
///     async fn run(
///         &self,
///         _generator: Arc<dyn TokenGenerator>,
///         tasks: Vec<Task>,
///         samples: u32,
///         _temperature: f64,
///         _concurrency: usize,
///     ) -> Result<Vec<Trajectory>> {
///         let mut out = Vec::new();
///         for task in &tasks {
///             for sample in 0..samples.max(1) {
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

    /// Runs every task `samples` times (at least once) at `temperature` (0: greedy) with
    /// `generator`, at most `concurrency` rollouts at once; returns the trajectories sorted
    /// by id. One rollout's failure is that trajectory's exit reason, never an error of the
    /// whole call; an error means the phase cannot run at all (bad configuration).
    async fn run(
        &self,
        generator: Arc<dyn TokenGenerator>,
        tasks: Vec<Task>,
        samples: u32,
        temperature: f64,
        concurrency: usize,
    ) -> Result<Vec<Trajectory>>;
}

#[async_trait]
impl<T: RolloutSource + ?Sized> RolloutSource for Arc<T> {
    fn codec(&self) -> &Arc<Codec> {
        (**self).codec()
    }
    async fn run(
        &self,
        generator: Arc<dyn TokenGenerator>,
        tasks: Vec<Task>,
        samples: u32,
        temperature: f64,
        concurrency: usize,
    ) -> Result<Vec<Trajectory>> {
        (**self)
            .run(generator, tasks, samples, temperature, concurrency)
            .await
    }
}
