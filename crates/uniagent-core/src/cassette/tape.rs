//! The replay's side of a cassette: the steps not yet replayed, and the generator and tools
//! that answer from them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::divergence::{first_difference, truncate_text, Divergence};
use super::{Step, ToolOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::generator::{GenerateOutput, GenerateRequest, TokenGenerator};
use crate::message::ToolSpec;
use crate::tool::{Tool, ToolContext, ToolOutput};

pub(super) fn replay_tool(
    spec: ToolSpec,
    live: Option<Arc<dyn Tool>>,
    tape: &Arc<Tape>,
) -> Arc<dyn Tool> {
    Arc::new(ReplayTool {
        spec,
        live,
        tape: Arc::clone(tape),
    })
}

/// The recorded steps not yet replayed, and the first divergence.
#[derive(Debug)]
pub(super) struct Tape {
    steps: Mutex<VecDeque<Step>>,
    state: Mutex<TapeState>,
}

#[derive(Debug, Default)]
struct TapeState {
    generations: u32,
    divergence: Option<Divergence>,
}

impl Tape {
    pub(super) fn new(steps: &[Step]) -> Self {
        Self {
            steps: Mutex::new(steps.iter().cloned().collect()),
            state: Mutex::new(TapeState::default()),
        }
    }

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

    pub(super) fn divergence(&self) -> Option<Divergence> {
        self.state.lock().ok().and_then(|s| s.divergence.clone())
    }

    /// A step left over after the rollout ended.
    pub(super) fn leftover(&self) -> Option<Divergence> {
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
pub(super) struct ReplayGenerator {
    pub(super) name: String,
    pub(super) tape: Arc<Tape>,
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
