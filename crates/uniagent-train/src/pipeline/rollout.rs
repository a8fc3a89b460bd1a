//! The rollout side: the pieces `uniagent_core::runner::Runner` takes, run unchanged for every
//! phase (demonstrations, evaluation, RL), over the policy's token generator.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use uniagent_core::agent::{CancellationToken, LoopConfig, TokenChatModel, Trajectory};
use uniagent_core::codec::Codec;
use uniagent_core::layer::Layer;
use uniagent_core::runner::{
    ProgressEvent, RolloutParts, RolloutPhase, RolloutSource, RunnerConfig,
};
use uniagent_core::telemetry::RunLabels;
use uniagent_core::{Error, FinishReason, GenerateOutput, GenerateRequest, Result, TokenGenerator};

/// Called on every finished rollout (progress bars); keep it cheap.
pub type RolloutProgress = Arc<dyn Fn(&ProgressEvent) + Send + Sync>;

/// The environment and agent of a run: the environment's [`RolloutParts`] (which must score
/// episodes: training needs a reward) and the loop, plus the policy's codec (tokenizer and
/// chat template).
#[derive(Clone)]
pub struct RolloutSpec {
    /// The agent's tools, the reward and a fresh sandbox per rollout.
    pub parts: RolloutParts,
    /// The loop (turns, sampling, length limits, mask policy). RL overrides the temperature;
    /// evaluation is greedy.
    pub loop_config: LoopConfig,
    /// The policy's tokenizer and chat template.
    pub codec: Arc<Codec>,
    /// Reports rollouts as they start and finish, if set.
    pub progress: Option<RolloutProgress>,
    /// The environment's name: the `environment` label of the rollout metrics.
    pub environment: String,
}

impl std::fmt::Debug for RolloutSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RolloutSpec")
            .field("parts", &self.parts)
            .field("loop_config", &self.loop_config)
            .field("environment", &self.environment)
            .finish_non_exhaustive()
    }
}

/// Collects a run's trajectories.
struct Collect(Vec<Trajectory>);

impl uniagent_core::runner::TrajectorySink for Collect {
    fn write(&mut self, trajectory: &Trajectory) -> Result<()> {
        self.0.push(trajectory.clone());
        Ok(())
    }
}

/// Our own loop as a rollout source: every rollout runs the agent loop through the runner that
/// [`RolloutParts::runner`] assembles, with a fresh sandbox per rollout.
#[async_trait]
impl RolloutSource for RolloutSpec {
    fn codec(&self) -> &Arc<Codec> {
        &self.codec
    }

    async fn run(
        &self,
        generator: Arc<dyn TokenGenerator>,
        phase: RolloutPhase,
    ) -> Result<Vec<Trajectory>> {
        if self.parts.reward.is_none() {
            return Err(Error::invalid_input(format!(
                "environment `{}` has no reward: nothing to train on",
                self.environment
            )));
        }
        let mut config = self.loop_config.clone();
        config.sampling.temperature = phase.temperature;
        let model = TokenChatModel::new(generator, self.codec.clone(), config.limits);
        let agent = self.parts.agent(Arc::new(model), config)?;
        let runner_config = RunnerConfig {
            samples_per_task: phase.samples,
            max_concurrent_rollouts: phase.concurrency,
            max_concurrent_sandbox_starts: phase.concurrency,
            ..RunnerConfig::default()
        };
        let labels = RunLabels::new(&self.environment, phase.label);
        let mut runner = self.parts.runner(agent, runner_config, labels)?;
        if let Some(progress) = self.progress.clone() {
            runner = runner.with_progress(move |e| progress(e));
        }
        let mut sink = Collect(Vec::new());
        runner
            .run(phase.tasks, &CancellationToken::new(), &mut sink)
            .await?;
        let mut out = sink.0;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

/// Gives every request a seed derived from the run's seed, the rollout and its context
/// length, so that a run is reproducible while the samples of one group differ. Put on by the
/// [`Seeding`] layer.
#[derive(Debug)]
pub struct Seeded<G> {
    inner: G,
    seed: u64,
}

impl<G> Seeded<G> {
    /// Wraps `inner`.
    pub fn new(inner: G, seed: u64) -> Self {
        Self { inner, seed }
    }
}

/// The [`Layer`] that seeds a generator's requests from the run's seed ([`Seeded`]).
///
/// ```
/// # use std::sync::Arc;
/// # use async_trait::async_trait;
/// # use uniagent_core::{Error, GenerateOutput, GenerateRequest, Result, SamplingParams, TokenGenerator};
/// # /// Fails with the seed it was asked to sample with.
/// # #[derive(Debug)] struct SeedEcho;
/// # #[async_trait] impl TokenGenerator for SeedEcho {
/// #     fn name(&self) -> &str { "echo" }
/// #     async fn generate(&self, r: GenerateRequest) -> Result<GenerateOutput> {
/// #         Err(Error::internal(format!("seed {:?}", r.sampling.seed)))
/// #     }
/// # }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use uniagent_core::layer::With;
/// use uniagent_train::pipeline::Seeding;
/// let engine: Arc<dyn TokenGenerator> = Arc::new(SeedEcho);
/// let seeded = engine.with(&Seeding(7));
/// let request = GenerateRequest::new(vec![1, 2], SamplingParams::default(), 4);
/// let error = seeded.generate(request.with_session_id("r1")).await.unwrap_err();
/// assert!(error.to_string().contains("seed Some("), "{error}");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seeding(pub u64);

impl Layer<Arc<dyn TokenGenerator>> for Seeding {
    fn wrap(&self, inner: Arc<dyn TokenGenerator>) -> Arc<dyn TokenGenerator> {
        Arc::new(Seeded::new(inner, self.0))
    }
}

#[async_trait]
impl<G: TokenGenerator> TokenGenerator for Seeded<G> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn generate(&self, mut request: GenerateRequest) -> Result<GenerateOutput> {
        let mut h = DefaultHasher::new();
        (self.seed, &request.session_id, request.prompt_ids.len()).hash(&mut h);
        request.sampling.seed = Some(h.finish());
        self.inner.generate(request).await
    }
}

/// The text a correct agent writes at turn `turn` (0-based) of task `task_id`, `None` when it
/// has nothing more to say.
pub type Script = dyn Fn(&str, usize) -> Option<String> + Send + Sync;

/// A scripted "policy" for demonstrations: each turn it emits the script's text, encoded with
/// the policy's codec and ended with the end-of-turn token, so that SFT data goes through
/// the same loop, sandboxes and reward as RL.
pub struct Demonstrator {
    codec: Arc<Codec>,
    script: Box<Script>,
    turns: Mutex<HashMap<String, usize>>,
}

impl std::fmt::Debug for Demonstrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Demonstrator").finish_non_exhaustive()
    }
}

impl Demonstrator {
    /// A demonstrator following `script`.
    pub fn new(
        codec: Arc<Codec>,
        script: impl Fn(&str, usize) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            codec,
            script: Box::new(script),
            turns: Mutex::default(),
        }
    }
}

#[async_trait]
impl TokenGenerator for Demonstrator {
    fn name(&self) -> &str {
        "demonstrator"
    }
    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let session = request.session_id.clone().unwrap_or_default();
        let task_id = session
            .rsplit_once(':')
            .map_or(session.as_str(), |(t, _)| t);
        let turn = {
            let mut turns = self
                .turns
                .lock()
                .map_err(|_| Error::internal("demonstrator lock poisoned"))?;
            let n = turns.entry(session.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let text = (self.script)(task_id, turn).ok_or_else(|| {
            Error::invalid_input(format!("no demonstration for turn {turn} of `{session}`"))
        })?;
        let mut ids = self.codec.encode(&text)?;
        ids.push(self.codec.eos_token_id());
        ids.truncate(request.max_new_tokens);
        Ok(GenerateOutput {
            // A script has no distribution: no logprobs, not zeros.
            logprobs: None,
            token_ids: ids,
            finish_reason: FinishReason::Stop,
            weight_version: None,
        })
    }
}
