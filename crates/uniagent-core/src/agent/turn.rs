//! One turn's tool calls: validate, run in order, collect observations, decide whether the
//! episode goes on.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use super::exit::ExitReason;
use super::feedback::{self, clip_observation};
use super::interaction::{race, tool_timeout, AgentInteraction, Episode, Raced, RolloutControl};
use crate::error::ErrorKind;
use crate::message::{Message, ToolCall};
use crate::model::AssistantTurn;
use crate::sandbox::Deployment;
use crate::task::Task;
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
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute_calls(
    agent: &AgentInteraction,
    rollout: &str,
    task: &Arc<Task>,
    deployment: Option<&Arc<dyn Deployment>>,
    control: &RolloutControl,
    deadline: Option<Instant>,
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
        if let Some(reason) = stop {
            observations.push(tool_message(call, skip_text(reason).to_owned()));
            continue;
        }
        let name = call.function.name.as_str();
        let Some(tool) = agent.tools().get(name) else {
            format_error = true;
            observations.push(tool_message(
                call,
                feedback::unknown_function(name, agent.tools().sorted_names()),
            ));
            continue;
        };
        let args = match &call.function.arguments {
            Value::Object(map) => Value::Object(map.clone()),
            _ => {
                format_error = true;
                observations.push(tool_message(call, feedback::invalid_arguments(name)));
                continue;
            }
        };
        let timeout = tool_timeout(config, deadline);
        if timeout.is_zero() {
            stop = Some(ExitReason::WallClockTimeout);
            observations.push(tool_message(
                call,
                skip_text(ExitReason::WallClockTimeout).to_owned(),
            ));
            continue;
        }
        ep.counts.tool_calls += 1;
        let ctx = ToolContext {
            deployment: deployment.cloned(),
            session: config.session.clone(),
            timeout,
            task: Arc::clone(task),
            call_id: call.id.clone(),
            rollout_id: rollout.to_owned(),
        };
        let t0 = Instant::now();
        let guard = timeout + config.tool_transport_margin;
        let ran = race(
            tokio::time::timeout(guard, tool.call(args, &ctx)),
            None,
            &control.cancel,
        )
        .await;
        ep.timings.tools += t0.elapsed().as_secs_f64();
        let content = match ran {
            Raced::Cancelled | Raced::Deadline => {
                stop = Some(ExitReason::Cancelled);
                skip_text(ExitReason::Cancelled).to_owned()
            }
            Raced::Done(Err(_elapsed)) => {
                ep.counts.tool_timeouts += 1;
                feedback::tool_timed_out(name, timeout.as_secs_f64())
            }
            Raced::Done(Ok(Ok(out))) => {
                if out.status == ToolStatus::TimedOut {
                    ep.counts.tool_timeouts += 1;
                }
                if let Some(signal) = out.signal {
                    ep.signal.get_or_insert(signal);
                }
                clip_observation(out.content, config.max_observation_chars)
            }
            Raced::Done(Ok(Err(e))) if e.kind() == ErrorKind::Timeout => {
                ep.counts.tool_timeouts += 1;
                feedback::tool_timed_out(name, timeout.as_secs_f64())
            }
            Raced::Done(Ok(Err(e))) => {
                stop = Some(ExitReason::SandboxError);
                let text = format!("Error: the tool `{name}` failed: {e}");
                ep.error = Some(text.clone());
                text
            }
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
