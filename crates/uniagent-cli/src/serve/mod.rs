//! The library side of `uniagent serve`: the rollout service verl's agent loop calls (through
//! the `uniagent-verl` Python package), one rollout per request. It runs the config's
//! environment (tools, sandbox, reward, loop limits, mask policy) through a runner assembled
//! as `uniagent run`'s ([`RolloutParts::runner`]); only the generator differs: every generation goes to the request's
//! generation bridge, that is to verl's own LLM client. `docs/verl.md` describes the routes.

mod answer;
mod request;
mod routes;
pub mod telemetry;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use uniagent_core::agent::{CancellationToken, ExitReason, LoopConfig, TokenChatModel, Trajectory};
use uniagent_core::codec::Codec;
use uniagent_core::layer::With;
use uniagent_core::runner::{RolloutPhase, RolloutSource, RunnerConfig};
use uniagent_core::telemetry::RunLabels;
use uniagent_core::{LengthLimits, RetryConfig, Task, TokenGenerator, ToolSpec};
use uniagent_gateway::harness::HarnessRollouts;
use uniagent_models::{HttpModelConfig, VerlBridgeGenerator};

pub use answer::rollout_answer;
pub use request::{BadRequest, RolloutRequest};
pub use routes::router;

use crate::config::{harness_gateway, RolloutSection};
use crate::env::{Environment, EnvironmentRegistry, RolloutParts};
use crate::error::{CliError, Result};
use crate::model::{LogVersions, ModelConfig, VersionLog};
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
    parts: RolloutParts,
    tool_specs: Vec<ToolSpec>,
    codec: Arc<Codec>,
    limits: LengthLimits,
    bridge_timeout: Duration,
    loop_config: LoopConfig,
    runner: RunnerConfig,
    tasks: Vec<Task>,
    harness: Option<HarnessRollouts>,
    slots: Arc<Semaphore>,
    /// Sandbox starts at once, across requests (`runner.max_concurrent_sandbox_starts`).
    starts: Arc<Semaphore>,
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
        let codec = Arc::new(codec);
        let tasks = config_tasks(&doc, &run, environment.as_ref(), run.tasks.limit)?;
        let mut loop_config = run.loop_config.clone();
        environment.configure_loop(&mut loop_config);
        loop_config
            .validate()
            .map_err(|e| doc.error_at(&["loop".into()], e))?;
        let harness = match RolloutSection::of(&doc, &run)? {
            RolloutSection::Loop => None,
            RolloutSection::Harness(h) => Some(
                HarnessRollouts::new(h, Arc::clone(&codec), harness_gateway(&loop_config))
                    .map_err(|e| doc.error_at(&["trainer".into(), "rollout".into()], e))?,
            ),
        };
        let parts = environment.parts()?;
        Ok(Self {
            tool_specs: parts.tools.iter().map(|t| t.spec()).collect(),
            environment,
            parts,
            codec,
            limits,
            bridge_timeout: model.bridge_timeout,
            loop_config,
            runner: run.runner.clone(),
            tasks: tasks.unwrap_or_default(),
            harness,
            slots: Arc::new(Semaphore::new(options.max_in_flight)),
            starts: Arc::new(Semaphore::new(
                run.runner.max_concurrent_sandbox_starts.max(1),
            )),
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
    /// early (the client went away), as does [`shut_down`](Self::shut_down). A harness
    /// session that recorded several chains answers with the last one and lists them all
    /// under `chains`.
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
        request
            .task
            .time_limit()
            .map(|_| ())
            .and_then(|()| self.environment.check_task(&request.task))
            .map_err(|m| BadRequest::new("task", m))?;
        let bridge = self.bridge(&request)?;
        let stop = cancel.child_token();
        let on_shutdown = self.shutdown.clone();
        let linked = stop.clone();
        let watcher = tokio::spawn(async move {
            on_shutdown.cancelled().await;
            linked.cancel();
        });
        let ran = match &self.harness {
            Some(source) => self.run_harness(source, &request, &bridge, &stop).await,
            None => self.run_loop(&request, &bridge, &stop).await,
        };
        watcher.abort();
        let mut answers: Vec<Value> = ran?
            .into_iter()
            .map(|(mut t, versions)| {
                t.sample = request.sample;
                t.id = uniagent_core::agent::rollout_id(&t.task_id, request.sample);
                rollout_answer(&t, versions, bridge.generator.num_preempted())
            })
            .collect();
        let chains = (answers.len() > 1).then(|| Value::Array(answers.clone()));
        let mut answer = answers
            .pop()
            .ok_or_else(|| Refusal::Internal("the rollout produced no trajectory".into()))?;
        if let (Some(chains), Some(map)) = (chains, answer.as_object_mut()) {
            map.insert("chains".into(), chains);
        }
        Ok(answer)
    }

    /// Our own loop over the environment's tools, reward and sandbox, through a runner
    /// assembled as `uniagent run`'s ([`RolloutParts::runner`]).
    async fn run_loop(
        &self,
        request: &RolloutRequest,
        bridge: &Bridge,
        stop: &CancellationToken,
    ) -> std::result::Result<Vec<(Trajectory, Option<Vec<Option<u64>>>)>, Refusal> {
        let model = TokenChatModel::new(
            Arc::clone(&bridge.versioned),
            Arc::clone(&self.codec),
            self.limits,
        );
        let mut config = self.loop_config.clone();
        if let Some(timeout) = request.timeout {
            config.wall_clock_budget =
                Some(config.wall_clock_budget.map_or(timeout, |b| b.min(timeout)));
        }
        let agent = self
            .parts
            .agent(Arc::new(model), config)
            .map_err(|e| Refusal::Internal(format!("the interaction: {e}")))?;
        let runner_config = RunnerConfig {
            samples_per_task: 1,
            max_concurrent_rollouts: 1,
            ..self.runner.clone()
        };
        let labels = RunLabels::new(self.environment.name(), "serve");
        let runner = self
            .parts
            .runner(agent, runner_config, labels)
            .map_err(|e| Refusal::Internal(format!("runner: {e}")))?
            .with_start_permits(Arc::clone(&self.starts));
        let mut finished = Vec::new();
        runner
            .run(vec![request.task.clone()], stop, &mut finished)
            .await
            .map_err(|e| Refusal::Internal(format!("the rollout: {e}")))?;
        Ok(finished
            .into_iter()
            .map(|t| {
                let versions = bridge.log.take(&t.id);
                (t, Some(versions))
            })
            .collect())
    }

    /// A black-box harness session (`trainer.rollout.source: harness`) through its own
    /// gateway; its chains carry their weight versions.
    async fn run_harness(
        &self,
        source: &HarnessRollouts,
        request: &RolloutRequest,
        bridge: &Bridge,
        stop: &CancellationToken,
    ) -> std::result::Result<Vec<(Trajectory, Option<Vec<Option<u64>>>)>, Refusal> {
        let temperature = request
            .sampling_params
            .get("temperature")
            .and_then(Value::as_f64)
            .unwrap_or(1.0);
        let mut phase = RolloutPhase::sampled(vec![request.task.clone()], 1, temperature, 1);
        phase.label = "serve";
        let generator: Arc<dyn TokenGenerator> = Arc::clone(&bridge.generator) as _;
        // Dropping the session's future kills the harness's process group.
        let chains = tokio::select! {
            ran = source.run(generator, phase) => {
                ran.map_err(|e| Refusal::Internal(format!("the harness: {e}")))?
            }
            () = stop.cancelled() => vec![Trajectory::empty(
                &request.task.id,
                0,
                request.task.messages.clone(),
                ExitReason::Cancelled,
                Some("the rollout was cancelled".into()),
            )],
        };
        Ok(chains.into_iter().map(|t| (t, None)).collect())
    }

    /// The generator of one request: verl's LLM client through the request's bridge, with the
    /// weight version of every sampled token logged.
    fn bridge(&self, request: &RolloutRequest) -> std::result::Result<Bridge, Refusal> {
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
        let bridge: Arc<dyn TokenGenerator> = Arc::clone(&generator) as _;
        let versioned = bridge.with(&LogVersions(Arc::clone(&log)));
        Ok(Bridge {
            generator,
            versioned,
            log,
        })
    }
}

/// One request's generator, with and without the version log.
struct Bridge {
    generator: Arc<VerlBridgeGenerator>,
    versioned: Arc<dyn TokenGenerator>,
    log: Arc<VersionLog>,
}
