//! Rollouts through the real loop: a token-level chat model over a generator, the
//! `execute_bash` and `finish` tools, the file-code reward, one host sandbox per rollout.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use indicatif::ProgressBar;
use uniagent_core::agent::{AgentInteraction, CancelToken, LoopConfig, TokenChatModel, Trajectory};
use uniagent_core::codec::Codec;
use uniagent_core::runner::{Runner, RunnerConfig, TrajectorySink};
use uniagent_core::{
    Deployment, Error, FinishReason, GenerateOutput, GenerateRequest, LengthLimits, Result,
    SamplingParams, Task, TokenGenerator, Tool,
};
use uniagent_envs::{HostConfig, HostDeployment};
use uniagent_tools::{ExecuteBash, Finish};
use uniagent_train::pipeline::SetupSandbox;

use crate::task::{CodeReward, FileQuestion};

/// Gives every request a seed derived from the run's seed, the rollout and the turn, so that
/// a run is reproducible while the samples of one group differ; records the weight version of
/// every sampled token per rollout.
#[derive(Debug)]
pub struct Seeded<G> {
    inner: G,
    seed: u64,
    versions: Mutex<HashMap<String, Vec<u64>>>,
}

impl<G> Seeded<G> {
    /// Wraps `inner`.
    pub fn new(inner: G, seed: u64) -> Self {
        Self {
            inner,
            seed,
            versions: Mutex::default(),
        }
    }

    /// The weight version of every token sampled for rollout `id` so far, in order (and
    /// forgets them).
    pub fn take_versions(&self, id: &str) -> Vec<u64> {
        self.versions
            .lock()
            .ok()
            .and_then(|mut v| v.remove(id))
            .unwrap_or_default()
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
        let session = request.session_id.clone().unwrap_or_default();
        let out = self.inner.generate(request).await?;
        if let Ok(mut versions) = self.versions.lock() {
            let v = out.weight_version.unwrap_or(0);
            versions
                .entry(session)
                .or_default()
                .extend(std::iter::repeat_n(v, out.token_ids.len()));
        }
        Ok(out)
    }
}

/// The demonstrator: samples exactly what a correct agent writes (read the file, then
/// finish with the code it read), through the same codec as the policy.
#[derive(Debug)]
pub struct Demonstrator {
    codec: Arc<Codec>,
    tasks: HashMap<String, FileQuestion>,
    turns: Mutex<HashMap<String, usize>>,
}

impl Demonstrator {
    /// A demonstrator for `tasks`.
    pub fn new(codec: Arc<Codec>, tasks: &[FileQuestion]) -> Self {
        Self {
            codec,
            tasks: tasks.iter().map(|t| (t.id.clone(), t.clone())).collect(),
            turns: Mutex::default(),
        }
    }
}

/// The assistant text of a correct turn `turn` (0: read the file, 1: finish).
pub fn demonstration(task: &FileQuestion, turn: usize) -> String {
    if turn == 0 {
        format!(
            "<tool_call>\n{{\"name\": \"execute_bash\", \"arguments\": {{\"command\": \"cat data/{}.txt\"}}}}\n</tool_call>",
            task.target
        )
    } else {
        format!(
            "<tool_call>\n{{\"name\": \"finish\", \"arguments\": {{\"answer\": \"{}\"}}}}\n</tool_call>",
            task.answer()
        )
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
        let task = self
            .tasks
            .get(task_id)
            .ok_or_else(|| Error::invalid_input(format!("unknown rollout `{session}`")))?;
        let turn = {
            let mut turns = self
                .turns
                .lock()
                .map_err(|_| Error::internal("demonstrator lock poisoned"))?;
            let n = turns.entry(session.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let mut ids = self.codec.encode(&demonstration(task, turn))?;
        ids.push(self.codec.eos_token_id());
        ids.truncate(request.max_new_tokens);
        Ok(GenerateOutput {
            logprobs: vec![0.0; ids.len()],
            token_ids: ids,
            finish_reason: FinishReason::Stop,
            weight_version: None,
        })
    }
}

/// How rollouts run.
#[derive(Debug, Clone)]
pub struct RolloutSettings {
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
    /// Tokens per assistant turn.
    pub max_turn_tokens: u32,
    /// Turns per episode.
    pub max_turns: u32,
    /// Rollouts (and sandboxes) at once.
    pub concurrency: usize,
    /// Samples per task.
    pub samples_per_task: u32,
    /// Host sandbox settings.
    pub host: HostConfig,
    /// Counts finished episodes (the rollouts progress bar), if any.
    pub progress: Option<ProgressBar>,
}

/// Keeps a run's trajectories and ticks the progress bar as each one finishes.
struct Counted {
    trajectories: Vec<Trajectory>,
    progress: Option<ProgressBar>,
}

impl TrajectorySink for Counted {
    fn write(&mut self, trajectory: &Trajectory) -> Result<()> {
        self.trajectories.push(trajectory.clone());
        if let Some(pb) = &self.progress {
            pb.inc(1);
        }
        Ok(())
    }
}

/// Runs every task `samples_per_task` times through the loop and returns the trajectories.
pub async fn run_rollouts(
    generator: Arc<dyn TokenGenerator>,
    codec: Arc<Codec>,
    tasks: Vec<Task>,
    settings: &RolloutSettings,
) -> Result<Vec<Trajectory>> {
    let limits = LengthLimits {
        max_model_len: Some(1000),
        ..LengthLimits::default()
    };
    let model = TokenChatModel::new(generator, codec, limits);
    let sampling = SamplingParams {
        temperature: settings.temperature,
        max_tokens: Some(settings.max_turn_tokens),
        ..SamplingParams::default()
    };
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(ExecuteBash {
            timeout: Duration::from_secs(10),
            ..ExecuteBash::default()
        }),
        Arc::new(Finish),
    ];
    let config = LoopConfig {
        max_turns: settings.max_turns,
        sampling,
        limits,
        format_error_budget: 1,
        ..LoopConfig::default()
    };
    let agent =
        AgentInteraction::new(Arc::new(model), tools, config)?.with_reward(Arc::new(CodeReward));
    let host = settings.host.clone();
    let runner = Runner::new(
        agent,
        RunnerConfig {
            samples_per_task: settings.samples_per_task,
            max_concurrent_rollouts: settings.concurrency,
            max_concurrent_sandbox_starts: settings.concurrency,
            ..RunnerConfig::default()
        },
    )?
    .with_sandboxes(move |task: &Task| {
        // The task's files are written when the sandbox starts.
        let script = FileQuestion::from_task(task)?.setup_script();
        let host = Box::new(HostDeployment::new(host.clone()));
        Ok(Box::new(SetupSandbox::new(host, script, 10.0)) as Box<dyn Deployment>)
    });
    let mut sink = Counted {
        trajectories: Vec::new(),
        progress: settings.progress.clone(),
    };
    runner.run(tasks, &CancelToken::new(), &mut sink).await?;
    let mut out = sink.trajectories;
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}
