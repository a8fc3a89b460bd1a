//! One turn's tool calls: validate, run in order, collect observations, decide whether the
//! episode goes on.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use super::episode::{race, Episode, Raced, Rollout};
use super::exit::ExitReason;
use super::feedback::{self, clip_observation};
use super::interaction::AgentInteraction;
use crate::error::ErrorKind;
use crate::message::{Message, ToolCall};
use crate::model::AssistantTurn;
use crate::telemetry;
use crate::tool::{EpisodeSignal, ToolContext, ToolStatus};

/// What the loop does after a turn's calls.
pub(crate) enum TurnOutcome {
    /// Append these observations and query again.
    Continue(Vec<Message>),
    /// End the episode; the observations go to the message record only.
    End(ExitReason, Vec<Message>),
}

fn tool_message(call: &ToolCall, content: String) -> Message {
    let mut m = Message::tool(call.id.clone(), content);
    m.name = Some(call.function.name.clone());
    m
}

fn skip_text(reason: ExitReason) -> &'static str {
    match reason {
        ExitReason::ToolTimeoutBudget => feedback::SKIPPED_TIMEOUT_BUDGET,
        ExitReason::WallClockTimeout => feedback::SKIPPED_WALL_CLOCK,
        ExitReason::Cancelled => feedback::SKIPPED_CANCELLED,
        _ => feedback::SKIPPED_SANDBOX,
    }
}

/// Runs the calls of `turn` in order and decides how the episode continues.
pub(crate) async fn execute_calls(
    agent: &AgentInteraction,
    rollout: &Rollout<'_>,
    turn: &AssistantTurn,
    ep: &mut Episode,
) -> TurnOutcome {
    let config = agent.loop_config();
    let calls = &turn.message.tool_calls;
    let mut observations = Vec::with_capacity(calls.len() + 1);
    let mut feedback_msgs = Vec::new();
    let mut format_error = false;
    if let Some(err) = &turn.format_error {
        format_error = true;
        feedback_msgs.push(Message::user(err.clone()));
    } else if calls.is_empty() {
        if config.chat_mode {
            return TurnOutcome::End(ExitReason::Finished, Vec::new());
        }
        format_error = true;
        feedback_msgs.push(Message::user(feedback::NO_FUNCTION_CALL));
    }
    let mut stop: Option<ExitReason> = None;
    for call in calls {
        let content = match stop {
            // After an ending, the remaining calls are answered without running.
            Some(reason) => skip_text(reason).to_owned(),
            None => match run_call(agent, rollout, call, ep).await {
                Called::Ran(content) => content,
                Called::Malformed(content) => {
                    format_error = true;
                    content
                }
                Called::Ends(reason, content) => {
                    stop = Some(reason);
                    content
                }
            },
        };
        observations.push(tool_message(call, content));
        if stop.is_none() && ep.counts.tool_timeouts >= config.tool_timeout_budget {
            stop = Some(ExitReason::ToolTimeoutBudget);
        }
    }
    if format_error {
        ep.counts.format_errors += 1;
    }
    observations.append(&mut feedback_msgs);
    if let Some(reason) = stop {
        return TurnOutcome::End(reason, observations);
    }
    if let Some(signal) = &ep.signal {
        let reason = match signal {
            EpisodeSignal::Finish { .. } => ExitReason::Finished,
            EpisodeSignal::Submit { .. } => ExitReason::Submitted,
        };
        return TurnOutcome::End(reason, observations);
    }
    if ep.counts.format_errors >= config.format_error_budget {
        return TurnOutcome::End(ExitReason::FormatErrorBudget, observations);
    }
    TurnOutcome::Continue(observations)
}

/// What one call came to: its observation, and whether it was malformed or ended the episode.
enum Called {
    Ran(String),
    Malformed(String),
    Ends(ExitReason, String),
}

/// Validates and runs one call with what is left of the time budgets.
async fn run_call(
    agent: &AgentInteraction,
    rollout: &Rollout<'_>,
    call: &ToolCall,
    ep: &mut Episode,
) -> Called {
    let config = agent.loop_config();
    let name = call.function.name.as_str();
    let Some(tool) = agent.tools().get(name) else {
        // The model's text is not a label: an unknown name counts under one fixed value.
        telemetry::tool_call("unknown", "malformed", None);
        let names = agent.tools().sorted_names();
        return Called::Malformed(feedback::unknown_function(name, names));
    };
    let args = match &call.function.arguments {
        Value::Object(map) => Value::Object(map.clone()),
        _ => {
            telemetry::tool_call(name, "malformed", None);
            return Called::Malformed(feedback::invalid_arguments(name));
        }
    };
    let timeout = rollout.tool_timeout(config);
    if timeout.is_zero() {
        let reason = ExitReason::WallClockTimeout;
        return Called::Ends(reason, skip_text(reason).to_owned());
    }
    ep.counts.tool_calls += 1;
    let ctx = ToolContext {
        deployment: rollout.deployment.cloned(),
        session: config.session.clone(),
        timeout,
        task: Arc::clone(&rollout.task),
        call_id: call.id.clone(),
        rollout_id: rollout.id.clone(),
    };
    let t0 = Instant::now();
    // The loop waits a margin longer than the tool's own timeout: a tool that honours it
    // answers first, one that does not still cannot stall the episode.
    let guard = timeout + config.tool_transport_margin;
    let ran = race(
        tokio::time::timeout(guard, tool.call(args, &ctx)),
        None,
        rollout.cancel(),
    )
    .await;
    ep.timings.tools += t0.elapsed().as_secs_f64();
    let elapsed = Some(t0.elapsed());
    match ran {
        Raced::Cancelled | Raced::Deadline => {
            telemetry::tool_call(name, "cancelled", None);
            let reason = ExitReason::Cancelled;
            Called::Ends(reason, skip_text(reason).to_owned())
        }
        Raced::Done(Err(_elapsed)) => {
            telemetry::tool_call(name, "timeout", elapsed);
            ep.counts.tool_timeouts += 1;
            Called::Ran(feedback::tool_timed_out(name, timeout.as_secs_f64()))
        }
        Raced::Done(Ok(Ok(out))) => {
            if out.status == ToolStatus::TimedOut {
                ep.counts.tool_timeouts += 1;
            }
            let outcome = match out.status {
                ToolStatus::Success => "ok",
                ToolStatus::Failed => "failed",
                ToolStatus::TimedOut => "timeout",
            };
            telemetry::tool_call(name, outcome, elapsed);
            if let Some(signal) = out.signal {
                ep.signal.get_or_insert(signal);
            }
            Called::Ran(clip_observation(out.content, config.max_observation_chars))
        }
        Raced::Done(Ok(Err(e))) if e.kind() == ErrorKind::Timeout => {
            telemetry::tool_call(name, "timeout", elapsed);
            ep.counts.tool_timeouts += 1;
            Called::Ran(feedback::tool_timed_out(name, timeout.as_secs_f64()))
        }
        Raced::Done(Ok(Err(e))) => {
            telemetry::tool_call(name, "error", elapsed);
            if let Some(d) = rollout.deployment {
                telemetry::sandbox_failed(d.backend(), "tool");
            }
            let text = format!("Error: the tool `{name}` failed: {e}");
            ep.error = Some(text.clone());
            Called::Ends(ExitReason::SandboxError, text)
        }
    }
}
