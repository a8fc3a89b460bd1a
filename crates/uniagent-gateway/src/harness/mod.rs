//! A black-box agent harness as a rollout source: each task × sample launches the configured
//! command against its own gateway session, and the session's chains become the trajectories
//! (`uniagent train` with `trainer.rollout.source: harness`).
//!
//! Per phase ([`RolloutSource::run`]) the source serves a [`Gateway`] over the generator it
//! is given on `127.0.0.1:<free port>`; it ends every session itself once the harness (and
//! the reward command, if any) exited, so a harness must not post `/end`.
//!
//! How each session ends (the training policy of `Trajectory::training_use` then applies):
//! - a reward (posted, or printed by the reward command): every chain carries it and keeps
//!   its own exit reason, whatever the harness's exit status (an ending the agent caused);
//! - no reward (route mode: none posted): `internal_error`, dropped from the batch and from
//!   its group's baseline, never a silent 0;
//! - the reward command failing (status, output, its time limit): `reward_error`, trained
//!   with 0 as in our own loop;
//! - the harness running past `timeout`: its process group is killed, `wall_clock_timeout`;
//! - a harness that never asked the model: one empty, masked trajectory with the above.
//!
//! Sampling is the phase's: the temperature the pipeline asks for (0 when evaluating)
//! replaces the harness's, and `top_p`/`top_k` are reset, so that the recorded logprobs are
//! those the trainer compares with.

mod config;
mod process;
mod session;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use uniagent_core::agent::{ExitReason, Trajectory};
use uniagent_core::codec::Codec;
use uniagent_core::layer::{Layer, With};
use uniagent_core::runner::{RolloutPhase, RolloutSource};
use uniagent_core::{
    Error as CoreError, GenerateOutput, GenerateRequest, Result as CoreResult, TokenGenerator,
};

pub use config::{HarnessConfig, HarnessReward};

use crate::config::GatewayConfig;
use crate::gateway::Gateway;
use crate::server::router;

/// A black-box harness as a [`RolloutSource`] (see the module docs).
///
/// ```no_run
/// use std::sync::Arc;
/// use uniagent_core::codec::Codec;
/// use uniagent_gateway::harness::{HarnessConfig, HarnessRollouts};
/// use uniagent_gateway::GatewayConfig;
/// # fn demo(codec: Arc<Codec>) -> uniagent_gateway::Result<()> {
/// let config = HarnessConfig {
///     command: vec!["python3".into(), "my_agent.py".into()],
///     ..HarnessConfig::default()
/// };
/// let gateway = GatewayConfig { tool_parser: None, ..GatewayConfig::default() };
/// let source = HarnessRollouts::new(config, codec, gateway)?;
/// // Pipeline::new(policy, source, pipeline_config, out) trains on it.
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct HarnessRollouts {
    config: HarnessConfig,
    codec: Arc<Codec>,
    gateway: GatewayConfig,
}

impl HarnessRollouts {
    /// A source launching `config`'s harness against gateways serving `codec` (the policy's)
    /// with `gateway`'s settings (`tool_parser` unset or the codec's).
    pub fn new(
        config: HarnessConfig,
        codec: Arc<Codec>,
        gateway: GatewayConfig,
    ) -> crate::Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            codec,
            gateway,
        })
    }

    /// The harness configuration.
    pub fn config(&self) -> &HarnessConfig {
        &self.config
    }
}

#[async_trait]
impl RolloutSource for HarnessRollouts {
    fn codec(&self) -> &Arc<Codec> {
        &self.codec
    }

    async fn run(
        &self,
        generator: Arc<dyn TokenGenerator>,
        phase: RolloutPhase,
    ) -> CoreResult<Vec<Trajectory>> {
        let RolloutPhase {
            tasks,
            samples,
            temperature,
            concurrency,
            ..
        } = phase;
        let generator = generator.with(&PhaseTemperature(temperature));
        let gateway = Arc::new(
            Gateway::with_shared_codec(self.codec.clone(), generator, self.gateway.clone())
                .map_err(|e| CoreError::invalid_input(e.to_string()))?,
        );
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| CoreError::internal(format!("harness gateway: binding a port: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| CoreError::internal(format!("harness gateway: {e}")))?;
        // Both sets abort what they hold when dropped: a cancelled phase kills its harnesses
        // (their process groups, through the sessions' guards) and stops its server.
        let mut server = JoinSet::new();
        let app = router(gateway.clone());
        server.spawn(async move { axum::serve(listener, app).await });

        let ctx = Arc::new(session::Context {
            config: self.config.clone(),
            gateway,
            base: format!("http://{addr}"),
        });
        let permits = Arc::new(Semaphore::new(concurrency));
        let mut sessions = JoinSet::new();
        let mut which = HashMap::new();
        let order: HashMap<String, usize> = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        for task in tasks {
            let task = Arc::new(task);
            for sample in 0..samples {
                let (ctx, task2, permits) = (ctx.clone(), task.clone(), permits.clone());
                let handle = sessions.spawn(async move {
                    let _permit = permits.acquire_owned().await;
                    session::run(&ctx, &task2, sample).await
                });
                which.insert(handle.id(), (task.id.clone(), sample));
            }
        }
        let mut out = Vec::new();
        while let Some(joined) = sessions.join_next_with_id().await {
            match joined {
                Ok((_, result)) => out.extend(result?),
                Err(e) => {
                    let (task_id, sample) = which.get(&e.id()).cloned().unwrap_or_default();
                    out.push(Trajectory::empty(
                        &task_id,
                        sample,
                        Vec::new(),
                        ExitReason::InternalError,
                        Some(format!("harness session panicked or was cancelled: {e}")),
                    ));
                }
            }
        }
        server.abort_all();
        // Task order, then sample; a session's chains stay in their order (a stable sort).
        out.sort_by_key(|t| (order.get(&t.task_id).copied(), t.sample));
        Ok(out)
    }
}

/// The phase's sampling in place of the harness's (put on by [`PhaseTemperature`]).
#[derive(Debug)]
struct PhaseSampling {
    inner: Arc<dyn TokenGenerator>,
    temperature: f64,
}

/// The [`Layer`] that samples every request at the phase's temperature, untruncated.
struct PhaseTemperature(f64);

impl Layer<Arc<dyn TokenGenerator>> for PhaseTemperature {
    fn wrap(&self, inner: Arc<dyn TokenGenerator>) -> Arc<dyn TokenGenerator> {
        Arc::new(PhaseSampling {
            inner,
            temperature: self.0,
        })
    }
}

#[async_trait]
impl TokenGenerator for PhaseSampling {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn generate(&self, mut request: GenerateRequest) -> CoreResult<GenerateOutput> {
        request.sampling.temperature = self.temperature;
        request.sampling.top_p = 1.0;
        request.sampling.top_k = None;
        self.inner.generate(request).await
    }
}
