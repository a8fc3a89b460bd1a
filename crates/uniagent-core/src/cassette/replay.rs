//! Replaying a [`Cassette`]: the same loop and codec over a generator and tools that answer
//! from the recorded steps, in order, stopping at the first [`Divergence`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::divergence::{first_difference, truncate_text, Divergence};
use super::{Cassette, RecordedTrajectory, Step, ToolOutcome};
use crate::agent::{AgentInteraction, CancelToken, TokenChatModel, Trajectory};
use crate::codec::Codec;
use crate::error::{Error, ErrorKind, Result};
use crate::generator::{GenerateOutput, GenerateRequest, TokenGenerator};
use crate::message::ToolSpec;
use crate::rollout::LengthLimits;
use crate::runner::{Runner, RunnerConfig, SandboxFactory};
use crate::tool::{Tool, ToolContext, ToolOutput};

/// Where the tool observations of a replay come from.
#[derive(Clone)]
pub enum ToolMode {
    /// The recorded observations: no sandbox, no tool runs.
    Recorded,
    /// The real tools, run in a fresh sandbox per rollout; each result is compared with the
    /// recorded one (content, status and signal) and the first difference is a
    /// [`Divergence::Observation`].
    Live {
        /// The tools, as the recording run built them.
        tools: Vec<Arc<dyn Tool>>,
        /// The sandbox of each rollout (setup included), if the tools need one.
        sandboxes: Option<Arc<dyn SandboxFactory>>,
    },
}

impl std::fmt::Debug for ToolMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Recorded => f.write_str("Recorded"),
            Self::Live { tools, sandboxes } => f
                .debug_struct("Live")
                .field("tools", &tools.len())
                .field("sandboxes", &sandboxes.is_some())
                .finish(),
        }
    }
}

/// What a replay needs besides the cassette: the codec and length limits of the recording
/// model, and where observations come from.
#[derive(Debug, Clone)]
pub struct ReplaySetup {
    /// The recording model's codec (chat template, tokenizer, tool-call parser).
    pub codec: Arc<Codec>,
    /// The recording model's length limits.
    pub limits: LengthLimits,
    /// Recorded or live tools.
    pub tools: ToolMode,
}

/// The result of replaying one cassette.
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    /// The rebuilt trajectory.
    pub trajectory: Trajectory,
    /// The first divergence; `None` when the replay is identical token for token.
    pub divergence: Option<Divergence>,
}

/// Replays `cassette`: runs its task once through the loop (the cassette's loop configuration,
/// `setup`'s codec) with a generator answering the recorded outputs — each keyed by the exact
/// prompt ids — and the tools of `setup`, then compares the rebuilt token record with the
/// recorded one. The reward is not computed. `Err` is for a setup that cannot run (invalid
/// loop configuration, duplicate tool names); every difference is a [`Divergence`].
pub async fn replay(cassette: &Cassette, setup: ReplaySetup) -> Result<ReplayOutcome> {
    let tape = Arc::new(Tape {
        steps: Mutex::new(cassette.steps.iter().cloned().collect()),
        state: Mutex::new(TapeState::default()),
    });
    let generator = ReplayGenerator {
        name: cassette.generator.clone(),
        tape: Arc::clone(&tape),
    };
    let (tools, sandboxes): (Vec<Arc<dyn Tool>>, _) = match setup.tools {
        ToolMode::Recorded => (
            cassette
                .tools
                .iter()
                .map(|spec| replay_tool(spec.clone(), None, &tape))
                .collect(),
            None,
        ),
        ToolMode::Live { tools, sandboxes } => (
            tools
                .into_iter()
                .map(|t| replay_tool(t.spec(), Some(t), &tape))
                .collect(),
            sandboxes,
        ),
    };
    let model = TokenChatModel::new(Arc::new(generator), setup.codec, setup.limits);
    let agent = AgentInteraction::new(Arc::new(model), tools, cassette.loop_config.clone())?;
    let mut runner = Runner::new(agent, RunnerConfig::default())?;
    if let Some(factory) = sandboxes {
        runner = runner.with_sandboxes(move |task: &crate::Task| factory.create(task));
    }
    let mut out: Vec<Trajectory> = Vec::new();
    runner
        .run(vec![cassette.task.clone()], &CancelToken::new(), &mut out)
        .await?;
    let trajectory = out.pop().ok_or_else(|| Error::Internal {
        message: "the replay runner returned no trajectory".into(),
    })?;
    let divergence = tape.divergence().or_else(|| {
        cassette
            .trajectory
            .compare(&RecordedTrajectory::of(&trajectory))
    });
    let divergence = divergence.or_else(|| tape.leftover());
    Ok(ReplayOutcome {
        trajectory,
        divergence,
    })
}

fn replay_tool(spec: ToolSpec, live: Option<Arc<dyn Tool>>, tape: &Arc<Tape>) -> Arc<dyn Tool> {
    Arc::new(ReplayTool {
        spec,
        live,
        tape: Arc::clone(tape),
    })
}

/// The recorded steps not yet replayed, and the first divergence.
#[derive(Debug)]
struct Tape {
    steps: Mutex<VecDeque<Step>>,
    state: Mutex<TapeState>,
}

#[derive(Debug, Default)]
struct TapeState {
    generations: u32,
    divergence: Option<Divergence>,
}

impl Tape {
    fn next(&self) -> Option<Step> {
        self.steps.lock().ok().and_then(|mut s| s.pop_front())
    }

    /// The turn being generated (for a generation) or the one whose calls run (for a tool).
    fn generations(&self) -> u32 {
        self.state.lock().map_or(0, |s| s.generations)
    }

    fn generated(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.generations += 1;
        }
    }

    /// Keeps `d` if it is the first, and returns the error that ends the rollout.
    fn diverge(&self, d: Divergence, backend: &str) -> Error {
        let message = d.to_string();
        if let Ok(mut s) = self.state.lock() {
            s.divergence.get_or_insert(d);
        }
        let message = format!("replay diverged: {message}");
        match backend {
            "tool" => Error::Sandbox {
                backend: "replay".into(),
                message,
                retryable: false,
                source: None,
            },
            _ => Error::Model {
                backend: "replay".into(),
                message,
                retryable: false,
                source: None,
            },
        }
    }

    fn divergence(&self) -> Option<Divergence> {
        self.state.lock().ok().and_then(|s| s.divergence.clone())
    }

    /// A step left over after the rollout ended.
    fn leftover(&self) -> Option<Divergence> {
        let step = self.next()?;
        Some(Divergence::Step {
            turn: self.generations(),
            expected: describe_step(Some(&step)),
            got: "the end of the rollout".into(),
        })
    }
}

fn describe_step(step: Option<&Step>) -> String {
    match step {
        Some(Step::Generate { .. } | Step::GenerateError { .. }) => "a generation".into(),
        Some(Step::Tool { name, .. }) => format!("a call of tool `{name}`"),
        None => "nothing more".into(),
    }
}

/// Answers each generation with the next recorded output, if the prompt is the recorded one.
#[derive(Debug)]
struct ReplayGenerator {
    name: String,
    tape: Arc<Tape>,
}

#[async_trait]
impl TokenGenerator for ReplayGenerator {
    fn name(&self) -> &str {
        &self.name
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput> {
        let turn = self.tape.generations();
        let step = self.tape.next();
        let (recorded, answer) = match step {
            Some(Step::Generate { request, output }) => (request, Ok(output)),
            Some(Step::GenerateError {
                request, message, ..
            }) => (
                request,
                Err(Error::Model {
                    backend: self.name.clone(),
                    message: format!("(recorded) {message}"),
                    retryable: false,
                    source: None,
                }),
            ),
            _ => {
                let d = Divergence::Step {
                    turn,
                    expected: describe_step(step.as_ref()),
                    got: "a generation".into(),
                };
                return Err(self.tape.diverge(d, "model"));
            }
        };
        if let Some(position) = first_difference(&recorded.prompt_ids, &request.prompt_ids) {
            let d = Divergence::Prompt {
                turn,
                position,
                expected: recorded.prompt_ids.get(position).copied(),
                got: request.prompt_ids.get(position).copied(),
            };
            return Err(self.tape.diverge(d, "model"));
        }
        self.tape.generated();
        answer
    }
}

/// Answers a tool call from the tape (recorded) or by running the real tool and comparing
/// (live).
#[derive(Debug)]
struct ReplayTool {
    spec: ToolSpec,
    live: Option<Arc<dyn Tool>>,
    tape: Arc<Tape>,
}

#[async_trait]
impl Tool for ReplayTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let name = self.spec.name().to_owned();
        let turn = self.tape.generations().saturating_sub(1);
        let step = self.tape.next();
        let Some(Step::Tool {
            name: recorded_name,
            arguments,
            outcome,
            ..
        }) = step
            .clone()
            .filter(|s| matches!(s, Step::Tool { name: n, .. } if *n == name))
        else {
            let d = Divergence::Step {
                turn,
                expected: describe_step(step.as_ref()),
                got: format!("a call of tool `{name}`"),
            };
            return Err(self.tape.diverge(d, "tool"));
        };
        if arguments != args {
            let d = Divergence::Arguments {
                turn,
                tool: recorded_name,
                expected: truncate_text(&arguments.to_string()),
                got: truncate_text(&args.to_string()),
            };
            return Err(self.tape.diverge(d, "tool"));
        }
        let Some(live) = &self.live else {
            return recorded_result(outcome, ctx);
        };
        let result = live.call(args, ctx).await;
        let got = match &result {
            Ok(output) => describe(&ToolOutcome::Output {
                output: output.clone(),
            }),
            Err(e) => describe(&ToolOutcome::Error {
                kind: e.kind(),
                message: e.to_string(),
            }),
        };
        let expected = describe(&outcome);
        if got != expected {
            let d = Divergence::Observation {
                turn,
                tool: name,
                expected: truncate_text(&expected),
                got: truncate_text(&got),
            };
            return Err(self.tape.diverge(d, "tool"));
        }
        result
    }
}

/// What a recorded outcome gives the loop: the output, or an error of the recorded kind.
fn recorded_result(outcome: ToolOutcome, ctx: &ToolContext) -> Result<ToolOutput> {
    match outcome {
        ToolOutcome::Output { output } => Ok(output),
        ToolOutcome::Error {
            kind: ErrorKind::Timeout,
            message,
        } => Err(Error::Timeout {
            operation: message,
            after: ctx.timeout,
        }),
        ToolOutcome::Abandoned => Err(Error::Timeout {
            operation: "the recorded tool call".into(),
            after: ctx.timeout,
        }),
        ToolOutcome::Error { message, .. } => Err(Error::Sandbox {
            backend: "replay".into(),
            message,
            retryable: false,
            source: None,
        }),
    }
}

/// The part of an outcome a live re-run must reproduce: status, content and signal of an
/// output (metadata may hold timings), the kind of an error.
fn describe(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Output { output } => {
            let status = serde_json::to_string(&output.status).unwrap_or_default();
            let signal = output
                .signal
                .as_ref()
                .map(|s| format!(" {}", serde_json::to_string(s).unwrap_or_default()))
                .unwrap_or_default();
            format!("{status}{signal}: {}", output.content)
        }
        ToolOutcome::Error { kind, .. } => format!("error ({kind:?})"),
        ToolOutcome::Abandoned => "no answer before the deadline".into(),
    }
}
