//! The library side of `uniagent serve`: the rollout service verl's agent loop calls (through
//! the `uniagent-verl` Python package), one rollout per request. It runs the config's
//! environment (tools, sandbox, reward, loop limits, mask policy) through the same [`Runner`]
//! as `uniagent run`; only the generator differs: every generation goes to the request's
//! generation bridge, that is to verl's own LLM client. `docs/verl.md` describes the routes.

mod answer;
mod request;
mod routes;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use uniagent_core::agent::{AgentInteraction, CancellationToken, LoopConfig, TokenChatModel};
use uniagent_core::codec::Codec;
use uniagent_core::runner::{Runner, RunnerConfig};
use uniagent_core::telemetry::RunLabels;
use uniagent_core::{LengthLimits, RetryConfig, Task, TokenGenerator, ToolSpec};
use uniagent_envs::models::{HttpModelConfig, VerlBridgeGenerator};

pub use answer::rollout_answer;
pub use request::{BadRequest, RolloutRequest};
pub use routes::router;

use crate::env::{Environment, EnvironmentParts, EnvironmentRegistry};
use crate::error::{CliError, Result};
use crate::model::{ModelConfig, VersionLog, Versioned};
use crate::run::{config_tasks, configure, RunOptions};

/// Settings of the service besides its config file.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `--set KEY=VALUE` overrides of the config, in order.
    pub overrides: Vec<String>,
    /// Rollouts running at once; more are answered 429.
    pub max_in_flight: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            overrides: Vec::new(),
            max_in_flight: 256,
        }
    }
}

/// The rollout service: the config's environment, the policy's chat template, and a bound on
/// the rollouts in flight.
pub struct RolloutService {
    environment: Box<dyn Environment>,
    parts: EnvironmentParts,
    tool_specs: Vec<ToolSpec>,
    codec: Arc<Codec>,
    limits: LengthLimits,
    bridge_timeout: Duration,
    loop_config: LoopConfig,
    runner: RunnerConfig,
    tasks: Vec<Task>,
    slots: Arc<Semaphore>,
    max_in_flight: usize,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for RolloutService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RolloutService")
            .field("environment", &self.environment.name())
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

/// Why a rollout was not run.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The request is malformed (422, naming the field).
    #[error(transparent)]
    Bad(#[from] BadRequest),
    /// `max_in_flight` rollouts are running (429).
    #[error("{0} rollouts are in flight, the most this service runs at once")]
    Busy(usize),
    /// The service is shutting down (503).
    #[error("the service is shutting down")]
    ShuttingDown,
    /// The rollout could not be set up (500): the environment's tools or the runner refused
    /// the service's settings.
    #[error("{0}")]
    Internal(String),
}

impl RolloutService {
    /// Reads the config (its `model:` section must be `type: verl`), builds the environment
    /// and loads the chat template. Errors are bad input (exit 2).
    pub fn from_config(
        config: &Path,
        options: &ServeOptions,
        registry: &EnvironmentRegistry,
    ) -> Result<Self> {
        if options.max_in_flight == 0 {
            return Err(CliError::config(
                "--max-in-flight",
                "0",
                "must be at least 1",
            ));
        }
        let run_options = RunOptions {
            overrides: options.overrides.clone(),
            ..RunOptions::default()
        };
        let (doc, run, environment) = configure(config, &run_options, registry)?;
        let ModelConfig::Verl(model) = &run.model else {
            return Err(doc.error_at(
                &["model".into(), "type".into()],
                format!(
                    "`uniagent serve` generates through verl's servers: set `type: verl` (with `tokenizer`), not `{}`",
                    run.model.backend()
                ),
            ));
        };
        let (codec, limits) = run.model.codec_and_limits()?;
        let tasks = config_tasks(&doc, &run, environment.as_ref(), run.tasks.limit)?;
        let mut loop_config = run.loop_config.clone();
        environment.configure_loop(&mut loop_config);
        loop_config
            .validate()
            .map_err(|e| doc.error_at(&["loop".into()], e))?;
        let parts = environment.parts()?;
        Ok(Self {
            tool_specs: parts.tools.iter().map(|t| t.spec()).collect(),
            environment,
            parts,
            codec: Arc::new(codec),
            limits,
            bridge_timeout: model.bridge_timeout,
            loop_config,
            runner: run.runner.clone(),
            tasks: tasks.unwrap_or_default(),
            slots: Arc::new(Semaphore::new(options.max_in_flight)),
            max_in_flight: options.max_in_flight,
            shutdown: CancellationToken::new(),
        })
    }

    /// The environment's name.
    pub fn environment(&self) -> &str {
        self.environment.name()
    }

    /// The config's tasks (`[]` without a `tasks:` section).
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// Rollouts running now.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.slots.available_permits()
    }

    /// `GET /v1/info`.
    pub fn info(&self) -> Value {
        serde_json::json!({
            "environment": self.environment.name(),
            "tools": self.tool_specs,
            "max_in_flight": self.max_in_flight,
            "in_flight": self.in_flight(),
        })
    }

    /// Checks what must exist before any sandbox starts (images, binaries), for the config's
    /// tasks: a service that cannot run a rollout fails at start, not on every request.
    pub async fn preflight(&self) -> Result<()> {
        self.environment.preflight(&self.tasks).await
    }

    /// Ends the rollouts in flight (as cancelled, their sandboxes stopped) and refuses new ones.
    pub fn shut_down(&self) {
        self.shutdown.cancel();
    }

    /// Runs one rollout to its end and answers it (see [`rollout_answer`]). `cancel` ends it
    /// early (the client went away), as does [`shut_down`](Self::shut_down).
    pub async fn rollout(
        &self,
        body: Value,
        cancel: &CancellationToken,
    ) -> std::result::Result<Value, Refusal> {
        if self.shutdown.is_cancelled() {
            return Err(Refusal::ShuttingDown);
        }
        let Ok(_slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            return Err(Refusal::Busy(self.max_in_flight));
        };
        let request = RolloutRequest::parse(body)?;
        self.environment
            .check_task(&request.task)
            .map_err(|m| BadRequest::new("task", m))?;
        let (agent, generator, log) = self.agent(&request)?;
        let runner_config = RunnerConfig {
            samples_per_task: 1,
            max_concurrent_rollouts: 1,
            ..self.runner.clone()
        };
        let mut runner = Runner::new(agent, runner_config)
            .map_err(|e| Refusal::Internal(format!("runner: {e}")))?
            .with_labels(RunLabels::new(self.environment.name(), "serve"));
        if let Some(factory) = &self.parts.sandboxes {
            let factory = Arc::clone(factory);
            runner = runner.with_sandboxes(move |task: &Task| factory.create(task));
        }
        let stop = cancel.child_token();
        let on_shutdown = self.shutdown.clone();
        let linked = stop.clone();
        let watcher = tokio::spawn(async move {
            on_shutdown.cancelled().await;
            linked.cancel();
        });
        let mut finished = Vec::new();
        let ran = runner
            .run(vec![request.task.clone()], &stop, &mut finished)
            .await;
        watcher.abort();
        let Some(mut t) = finished.pop().filter(|_| ran.is_ok()) else {
            return Err(Refusal::ShuttingDown);
        };
        let versions = log.take(&t.id);
        t.sample = request.sample;
        t.id = uniagent_core::agent::rollout_id(&t.task_id, request.sample);
        Ok(rollout_answer(&t, versions, generator.num_preempted()))
    }

    /// The interaction of one request: the config's tools and reward over a chat model whose
    /// generations go to the request's bridge.
    fn agent(
        &self,
        request: &RolloutRequest,
    ) -> std::result::Result<(AgentInteraction, Arc<VerlBridgeGenerator>, Arc<VersionLog>), Refusal>
    {
        let mut http = HttpModelConfig::new(vec![request.bridge_url.clone()], "verl");
        http.timeout = self.bridge_timeout;
        // A refused connection is retried (nothing was generated); the bridge's own errors
        // are verl's and end the rollout after one more try.
        http.retry = RetryConfig {
            max_attempts: 2,
            ..RetryConfig::default()
        };
        let generator = Arc::new(
            VerlBridgeGenerator::new(
                &http,
                request.request_id.clone(),
                request.sampling_params.clone(),
            )
            .map_err(|e| BadRequest::new("bridge_url", e.to_string()))?,
        );
        let log = Arc::new(VersionLog::default());
        let versioned: Arc<dyn TokenGenerator> = Arc::new(Versioned {
            inner: Arc::clone(&generator) as Arc<dyn TokenGenerator>,
            log: Arc::clone(&log),
        });
        let model = TokenChatModel::new(versioned, Arc::clone(&self.codec), self.limits);
        let mut config = self.loop_config.clone();
        if let Some(timeout) = request.timeout {
            config.wall_clock_budget =
                Some(config.wall_clock_budget.map_or(timeout, |b| b.min(timeout)));
        }
        let mut agent = AgentInteraction::new(Arc::new(model), self.parts.tools.clone(), config)
            .map_err(|e| Refusal::Internal(format!("the interaction: {e}")))?;
        if let Some(reward) = &self.parts.reward {
            agent = agent.with_reward(Arc::clone(reward));
        }
        Ok((agent, generator, log))
    }
}
