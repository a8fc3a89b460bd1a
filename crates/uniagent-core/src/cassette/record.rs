//! Recording: wrappers around the generator and the tools that append every step to a shared
//! [`Recorder`], keyed by rollout id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::{Cassette, RecordedTrajectory, Step, ToolOutcome, CASSETTE_VERSION};
use crate::agent::{LoopConfig, Trajectory};
use crate::error::Result;
use crate::generator::{GenerateOutput, GenerateRequest, TokenGenerator};
use crate::layer::Layer;
use crate::message::ToolSpec;
use crate::task::Task;
use crate::tool::{Tool, ToolContext, ToolOutput};

/// The steps of the rollouts in flight, by rollout id. Shared by one [`RecordGenerator`] and
/// the [`RecordTool`]s of a run; a finished rollout's steps leave it through
/// [`cassette`](Recorder::cassette) (or [`discard`](Recorder::discard)).
#[derive(Debug, Default)]
pub struct Recorder {
    rollouts: Mutex<HashMap<String, Rollout>>,
}

#[derive(Debug, Default)]
struct Rollout {
    steps: Vec<Step>,
    generations: u32,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn push(&self, rollout: &str, step: Step) {
        if let Ok(mut map) = self.rollouts.lock() {
            let r = map.entry(rollout.to_owned()).or_default();
            if matches!(step, Step::Generate { .. } | Step::GenerateError { .. }) {
                r.generations += 1;
            }
            r.steps.push(step);
        }
    }

    /// The 0-based assistant turn rollout `rollout` is in (its latest generation).
    fn turn(&self, rollout: &str) -> u32 {
        self.rollouts
            .lock()
            .ok()
            .and_then(|m| m.get(rollout).map(|r| r.generations.saturating_sub(1)))
            .unwrap_or(0)
    }

    /// Rollouts with steps recorded and not yet taken.
    pub fn in_flight(&self) -> usize {
        self.rollouts.lock().map_or(0, |m| m.len())
    }

    /// Forgets the steps of rollout `id` (a rollout that will not be kept).
    pub fn discard(&self, id: &str) {
        if let Ok(mut m) = self.rollouts.lock() {
            m.remove(id);
        }
    }

    /// Takes the steps of the finished `trajectory` (by its id) and makes its cassette.
    /// `generator` names the backend; `context` is kept verbatim for the caller's replay.
    pub fn cassette(
        &self,
        trajectory: &Trajectory,
        task: &Task,
        tools: Vec<ToolSpec>,
        loop_config: LoopConfig,
        generator: &str,
        context: Value,
    ) -> Cassette {
        let steps = self
            .rollouts
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&trajectory.id))
            .map(|r| r.steps)
            .unwrap_or_default();
        Cassette {
            cassette: CASSETTE_VERSION,
            id: trajectory.id.clone(),
            uniagent_version: env!("CARGO_PKG_VERSION").to_owned(),
            generator: generator.to_owned(),
            task: task.clone(),
            sample: trajectory.sample,
            tools,
            loop_config,
            steps,
            trajectory: RecordedTrajectory::of(trajectory),
            context,
        }
    }
}

/// A [`TokenGenerator`] that records every request and output into a [`Recorder`], under the
/// request's `session_id` (the rollout id, as
/// [`TokenChatModel`](crate::agent::TokenChatModel) sets it). Requests without a session are
/// passed through unrecorded. A failed generation is recorded as [`Step::GenerateError`].
#[derive(Debug)]
pub struct RecordGenerator {
    inner: Arc<dyn TokenGenerator>,
    recorder: Arc<Recorder>,
}

impl RecordGenerator {
    /// Records what `inner` generates into `recorder`.
    pub fn new(inner: Arc<dyn TokenGenerator>, recorder: Arc<Recorder>) -> Self {
        Self { inner, recorder }
    }
}

#[async_trait]
impl TokenGenerator for RecordGenerator {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let Some(rollout) = request.session_id.clone() else {
            return self.inner.generate(request).await;
        };
        match self.inner.generate(request.clone()).await {
            Ok(output) => {
                self.recorder.push(
                    &rollout,
                    Step::Generate {
                        request,
                        output: output.clone(),
                    },
                );
                Ok(output)
            }
            Err(e) => {
                self.recorder.push(
                    &rollout,
                    Step::GenerateError {
                        request,
                        kind: e.kind(),
                        message: e.to_string(),
                    },
                );
                Err(e)
            }
        }
    }
}

/// A [`Tool`] that records every call and its outcome into a [`Recorder`], under
/// [`ToolContext::rollout_id`]. A call the loop stops waiting for (its transport deadline)
/// is recorded as [`ToolOutcome::Abandoned`].
#[derive(Debug)]
pub struct RecordTool {
    inner: Arc<dyn Tool>,
    recorder: Arc<Recorder>,
}

impl RecordTool {
    /// Records the calls of `inner` into `recorder`.
    pub fn new(inner: Arc<dyn Tool>, recorder: Arc<Recorder>) -> Self {
        Self { inner, recorder }
    }
}

/// A recorder is the recording [`Layer`]: a generator or a tool put under it
/// (`generator.with(&recorder)`) is a [`RecordGenerator`] or a [`RecordTool`] recording into
/// it.
impl Layer<Arc<dyn TokenGenerator>> for Arc<Recorder> {
    fn wrap(&self, inner: Arc<dyn TokenGenerator>) -> Arc<dyn TokenGenerator> {
        Arc::new(RecordGenerator::new(inner, Arc::clone(self)))
    }
}

impl Layer<Arc<dyn Tool>> for Arc<Recorder> {
    fn wrap(&self, inner: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Arc::new(RecordTool::new(inner, Arc::clone(self)))
    }
}

/// A call in progress: recorded as abandoned if dropped before it finishes.
struct Pending<'a> {
    recorder: &'a Recorder,
    rollout: &'a str,
    call: Option<(u32, String, String, Value)>,
}

impl Pending<'_> {
    fn finish(mut self, outcome: ToolOutcome) {
        if let Some(call) = self.call.take() {
            self.record(call, outcome);
        }
    }

    fn record(
        &self,
        (turn, name, call_id, arguments): (u32, String, String, Value),
        outcome: ToolOutcome,
    ) {
        self.recorder.push(
            self.rollout,
            Step::Tool {
                turn,
                name,
                call_id,
                arguments,
                outcome,
            },
        );
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.record(call, ToolOutcome::Abandoned);
        }
    }
}

#[async_trait]
impl Tool for RecordTool {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let name = self.inner.spec().name().to_owned();
        let pending = Pending {
            recorder: &self.recorder,
            rollout: &ctx.rollout_id,
            call: Some((
                self.recorder.turn(&ctx.rollout_id),
                name,
                ctx.call_id.clone(),
                args.clone(),
            )),
        };
        let result = self.inner.call(args, ctx).await;
        let outcome = match &result {
            Ok(output) => ToolOutcome::Output {
                output: output.clone(),
            },
            Err(e) => ToolOutcome::Error {
                kind: e.kind(),
                message: e.to_string(),
            },
        };
        pending.finish(outcome);
        result
    }
}
