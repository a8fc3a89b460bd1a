//! End-to-end tests of the interaction loop: every exit reason is produced by a scripted
//! episode and asserted, together with what the trajectory holds.

// Test helpers may unwrap (a panic fails the test); core's `Error` is large by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use serde_json::json;
use uniagent_core::agent::TokenChatModel;
use uniagent_core::agent::{
    AgentInteraction, CancellationToken, ExitReason, LoopConfig, MaskPolicy, RolloutControl,
    Trajectory, NO_FUNCTION_CALL, SKIPPED_SANDBOX, SKIPPED_TIMEOUT_BUDGET,
};
use uniagent_core::testing::{
    BashTool, RecordingTool, ScriptedChatModel, ScriptedDeployment, ScriptedTokenGenerator,
    ScriptedTurn,
};
use uniagent_core::{
    ChatModel, Deployment, Error, LengthLimits, Message, Result, RewardContext, RewardOutcome,
    RewardSpec, Role, Tool, ToolOutput,
};

fn tools(list: Vec<Arc<dyn Tool>>) -> Vec<Arc<dyn Tool>> {
    list
}

/// Runs `model` with `echo` (a clone, sharing its record of calls) as its only tool and no
/// sandbox.
async fn run_echo(model: impl ChatModel, echo: &RecordingTool, cfg: LoopConfig) -> Trajectory {
    run_with(model, tools(vec![Arc::new(echo.clone())]), cfg, None).await
}

/// The default loop config with at most `n` turns.
fn max_turns(n: u32) -> LoopConfig {
    LoopConfig {
        max_turns: n,
        ..LoopConfig::default()
    }
}

/// The default loop config with these length limits.
fn limited(limits: LengthLimits) -> LoopConfig {
    LoopConfig {
        limits,
        ..LoopConfig::default()
    }
}

/// Echo calls `c0`, `c1`, … for `n` turns.
fn echo_calls(n: usize) -> Vec<ScriptedTurn> {
    (0..n).map(|i| echo_call(&format!("c{i}"))).collect()
}

/// The real token-level model over the Qwen2.5 codec, sampling `script`.
fn token_model(script: Vec<ScriptedTurn>) -> TokenChatModel {
    let generator = ScriptedTokenGenerator::new(codec(), script);
    TokenChatModel::new(Arc::new(generator), codec(), LengthLimits::default())
}

/// The end-of-turn id every sampled turn ends with.
fn end_of_turn() -> u32 {
    codec().stop_token_ids()[0]
}

#[tokio::test]
async fn finish_on_the_last_allowed_turn_counts_as_finished() {
    let finish = finish_tool();
    let model = ScriptedChatModel::new(vec![
        echo_call("c0"),
        reply(vec![call("c1", "finish", json!({"answer": "42"}))]),
        echo_call("never"),
    ]);
    let t = run_with(
        model,
        tools(vec![Arc::new(echo_tool()), Arc::new(finish.clone())]),
        max_turns(2),
        None,
    )
    .await;
    assert_eq!(t.exit_reason, ExitReason::Finished, "{:?}", t.error);
    assert_eq!(t.counts.turns, 2);
    assert_eq!(finish.calls().len(), 1);
    assert_eq!(t.output.extra_fields["traj_exit_reason"], "finished");
    // The finish observation is in the record, answering its call.
    let last = t.messages.last().unwrap();
    assert_eq!(
        (last.role, last.tool_call_id.as_deref(), last.text()),
        (Role::Tool, Some("c1"), "42")
    );
}

#[tokio::test]
async fn chat_mode_reply_without_calls_finishes() {
    let model = ScriptedChatModel::new(vec![ScriptedTurn::Reply(Message::assistant(
        "the answer is 4",
    ))]);
    let cfg = LoopConfig {
        chat_mode: true,
        ..LoopConfig::default()
    };
    let t = run_with(model, vec![], cfg, None).await;
    assert_eq!(t.exit_reason, ExitReason::Finished);
    assert_eq!(t.messages.last().unwrap().text(), "the answer is 4");
}

#[tokio::test]
async fn submit_ends_the_trace_on_the_sampled_end_of_turn() {
    let model = token_model(vec![
        echo_call("c0"),
        reply(vec![call("c1", "submit", json!({}))]),
    ]);
    let t = run_with(
        model,
        tools(vec![Arc::new(echo_tool()), Arc::new(submit_tool())]),
        LoopConfig::default(),
        None,
    )
    .await;
    assert_eq!(t.exit_reason, ExitReason::Submitted);
    assert!(!t.masked);
    // The trace ends on the last sampled token, not on an unused observation + generation prompt.
    assert_eq!(t.output.response_ids.last(), Some(&end_of_turn()));
    assert_eq!(t.output.response_mask.last(), Some(&1));
    // The submit observation is still in the messages.
    assert_eq!(t.messages.last().unwrap().text(), "<<<Finished>>>");
    let lps = t.output.response_logprobs.as_ref().unwrap();
    assert_eq!(lps.len(), t.output.response_ids.len());
    assert!(t
        .output
        .response_mask
        .iter()
        .zip(lps)
        .all(|(&m, &lp)| (m == 1) == (lp != 0.0)));
}

#[tokio::test]
async fn max_turns_stops_before_querying_again() {
    let model = ScriptedChatModel::new(echo_calls(5));
    let echo = echo_tool();
    let t = run_echo(model.clone(), &echo, max_turns(3)).await;
    assert_eq!(t.exit_reason, ExitReason::MaxTurns);
    assert_eq!((t.counts.turns, t.counts.tool_calls), (3, 3));
    assert_eq!(model.requests().len(), 3);
    assert_eq!(echo.calls().len(), 3);
    // A message-level trajectory has no tokens: nothing to train on.
    assert!(t.masked);
    // A token-level one is trainable by default and masked under Uni-Agent's strict policy.
    let tm = token_model(echo_calls(5));
    let t = run_echo(tm, &echo_tool(), max_turns(3)).await;
    assert_eq!(t.exit_reason, ExitReason::MaxTurns);
    assert!(!t.masked);
    assert!(t.output.response_mask.contains(&1));
    let strict = LoopConfig {
        mask: MaskPolicy::all_but(&[ExitReason::Finished, ExitReason::Submitted]),
        ..max_turns(3)
    };
    let tm = token_model(echo_calls(5));
    let t = run_echo(tm, &echo_tool(), strict).await;
    assert_eq!(t.exit_reason, ExitReason::MaxTurns);
    assert!(t.masked);
    assert!(!t.output.response_ids.is_empty());
    assert!(t.output.response_mask.iter().all(|&m| m == 0));
    assert_eq!(t.output.extra_fields["traj_masked"], 1);
}

/// Tokens of one echo turn (sampled, with its end-of-turn id) and of its observation
/// (inserted: the template's glue, the tool message and the next generation prompt).
fn echo_turn_tokens(id: &str) -> (usize, usize) {
    let codec = codec();
    let generator = ScriptedTokenGenerator::new(codec.clone(), Vec::new());
    let mut ids = generator.turn_ids(&echo_call(id)).unwrap();
    ids.push(end_of_turn());
    let kwargs = serde_json::Map::new();
    let mut cache = codec
        .start(
            "probe",
            task().messages.clone(),
            Vec::new(),
            kwargs,
            LengthLimits::default(),
        )
        .unwrap();
    codec
        .append_sampled(&mut cache, &ids, &vec![-0.5; ids.len()], None)
        .unwrap();
    let len = |c: &uniagent_core::RolloutCache| c.tokens().unwrap().len();
    let before = len(&cache);
    let mut obs = Message::tool(id, "ok");
    obs.name = Some("echo".into());
    codec.append_messages(&mut cache, &[obs]).unwrap();
    (ids.len(), len(&cache) - before)
}

#[tokio::test]
async fn token_limit_ends_the_episode_and_masks_the_cut_turn() {
    let (sampled, inserted) = echo_turn_tokens("c0");
    let long = ScriptedTurn::Reply(Message::assistant("word ".repeat(100)));
    let model = token_model(vec![echo_call("c0"), long]);
    let cfg = limited(LengthLimits {
        max_response_len: Some(sampled + inserted + 10),
        ..LengthLimits::default()
    });
    let t = run_echo(model, &echo_tool(), cfg).await;
    assert_eq!(t.exit_reason, ExitReason::TokenLimit, "{:?}", t.error);
    assert_eq!(t.counts.turns, 2);
    let mask = &t.output.response_mask;
    assert_eq!(mask.len(), sampled + inserted + 10);
    assert!(
        mask[..sampled].iter().all(|&m| m == 1),
        "the complete first turn stays trainable"
    );
    assert!(
        mask[sampled..].iter().all(|&m| m == 0),
        "the cut turn is masked"
    );
    assert!(t.output.response_logprobs.unwrap()[sampled..]
        .iter()
        .all(|&lp| lp == 0.0));
}

#[tokio::test]
async fn over_long_prompt_is_a_context_overflow_before_any_model_call() {
    let model = token_model(vec![echo_call("c0")]);
    let cfg = limited(LengthLimits {
        max_model_len: Some(10),
        ..LengthLimits::default()
    });
    let t = run_echo(model, &echo_tool(), cfg).await;
    assert_eq!(t.exit_reason, ExitReason::ContextOverflow);
    assert_eq!(t.counts.turns, 0);
    assert!(t.masked, "nothing sampled, nothing to train");
    assert!(t.error.unwrap().contains("max_model_len"));
    // The prompt is reported whole, never cut from either end.
    assert!(t.output.prompt_ids.len() > 10);
}

#[tokio::test]
async fn observation_that_overflows_the_context_ends_the_episode() {
    let (sampled, _) = echo_turn_tokens("c0");
    // A fresh generator per run: it counts turns per rollout id.
    let model = || token_model(vec![echo_call("c0"), echo_call("c1")]);
    // The prompt as the template renders it with the same tools.
    let prompt = run_echo(model(), &echo_tool(), max_turns(1))
        .await
        .output
        .prompt_ids
        .len();
    let cfg = limited(LengthLimits {
        max_model_len: Some(prompt + sampled + 3),
        ..LengthLimits::default()
    });
    let t = run_echo(model(), &echo_tool(), cfg).await;
    assert_eq!(t.exit_reason, ExitReason::ContextOverflow, "{:?}", t.error);
    assert_eq!(t.output.response_ids.len(), sampled);
    assert_eq!(
        t.messages.last().unwrap().role,
        Role::Tool,
        "the observation is kept in the messages"
    );
}

#[tokio::test]
async fn format_errors_are_fed_back_and_bounded() {
    let echo = echo_tool();
    let model = ScriptedChatModel::new(vec![
        ScriptedTurn::Reply(Message::assistant("I will think more.")),
        reply(vec![
            call("c1", "echo", json!({"text": "still runs"})),
            call("c2", "nope", json!({})),
        ]),
        ScriptedTurn::FormatError {
            content: "<tool_call>{".into(),
            error: "Unclosed tool call".into(),
        },
        echo_call("never"),
    ]);
    let cfg = LoopConfig {
        format_error_budget: 3,
        ..LoopConfig::default()
    };
    let t = run_echo(model.clone(), &echo, cfg).await;
    assert_eq!(t.exit_reason, ExitReason::FormatErrorBudget);
    assert_eq!(t.counts.format_errors, 3);
    // The valid call of the mixed turn ran; the bad one got an error addressed to its id.
    assert_eq!(echo.calls().len(), 1);
    let reqs = model.requests();
    let second = &reqs[1].messages;
    assert_eq!(second.last().unwrap().text(), NO_FUNCTION_CALL);
    let third = &reqs[2].messages;
    let bad = third
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c2"))
        .unwrap();
    assert!(
        bad.text()
            .starts_with("Invalid action: function 'nope' is not defined"),
        "{}",
        bad.text()
    );
    assert_eq!(t.messages.last().unwrap().text(), "Unclosed tool call");
}

#[tokio::test(start_paused = true)]
async fn timed_out_calls_exhaust_the_budget_and_skip_the_rest() {
    let slow = Arc::new(SlowTool::default());
    let timed_out = RecordingTool::new("flaky", |_| {
        Ok(ToolOutput::timed_out("command took too long"))
    });
    let echo = echo_tool();
    let model = ScriptedChatModel::new(vec![reply(vec![
        call("a", "slow", json!({})),
        call("b", "flaky", json!({})),
        call("c", "echo", json!({"text": "x"})),
    ])]);
    let cfg = LoopConfig {
        tool_timeout: Duration::from_secs(30),
        tool_transport_margin: Duration::from_secs(5),
        tool_timeout_budget: 2,
        ..LoopConfig::default()
    };
    let start = tokio::time::Instant::now();
    let t = run_with(
        model,
        tools(vec![
            slow.clone(),
            Arc::new(timed_out.clone()),
            Arc::new(echo.clone()),
        ]),
        cfg,
        None,
    )
    .await;
    assert_eq!(t.exit_reason, ExitReason::ToolTimeoutBudget);
    assert_eq!(t.counts.tool_timeouts, 2);
    assert!(
        echo.calls().is_empty(),
        "calls after the budget ran out are skipped"
    );
    let skipped = t
        .messages
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c"))
        .unwrap();
    assert_eq!(skipped.text(), SKIPPED_TIMEOUT_BUDGET);
    // The tool got 30 s; the loop waited 30 + 5 s, never cutting the tool's own timeout short.
    assert_eq!(
        *slow.seen_timeouts.lock().unwrap(),
        vec![Duration::from_secs(30)]
    );
    assert!(
        start.elapsed() >= Duration::from_secs(35) && start.elapsed() < Duration::from_secs(36)
    );
    let slow_obs = t
        .messages
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("a"))
        .unwrap();
    assert!(slow_obs.text().contains("took more than 30 seconds"));
}

#[tokio::test]
async fn sandbox_failure_ends_the_episode_and_skips_remaining_calls() {
    let sandbox = ScriptedDeployment::new()
        .on_command("ls", "a b\n", 0)
        .on_command_crash("boom", false);
    let model = ScriptedChatModel::new(vec![
        reply(vec![call("c0", "bash", json!({"command": "ls"}))]),
        reply(vec![
            call("c1", "bash", json!({"command": "boom"})),
            call("c2", "bash", json!({"command": "ls"})),
        ]),
    ]);
    let dep: Arc<dyn Deployment> = Arc::new(sandbox.clone());
    let t = run_with(
        model,
        tools(vec![Arc::new(BashTool)]),
        LoopConfig::default(),
        Some(dep),
    )
    .await;
    assert_eq!(t.exit_reason, ExitReason::SandboxError);
    assert!(t.masked);
    assert!(
        t.error.as_deref().unwrap().contains("connection lost"),
        "{:?}",
        t.error
    );
    assert_eq!(t.messages.last().unwrap().text(), SKIPPED_SANDBOX);
    let log = sandbox.log();
    assert_eq!(log[0], "create_session: default");
    assert_eq!(
        log.iter()
            .filter(|l| l.starts_with("run_in_session"))
            .count(),
        2
    );
}

#[tokio::test]
async fn model_failure_is_a_model_error() {
    let model = ScriptedChatModel::new(vec![
        echo_call("c0"),
        ScriptedTurn::Fail {
            message: "503 upstream".into(),
            retryable: true,
        },
    ]);
    let t = run_echo(model, &echo_tool(), LoopConfig::default()).await;
    assert_eq!(t.exit_reason, ExitReason::ModelError);
    assert!(t.masked);
    assert!(t.error.unwrap().contains("503 upstream"));
    assert_eq!(t.counts.turns, 1);
}

#[derive(Debug)]
struct BrokenReward;

#[async_trait]
impl RewardSpec for BrokenReward {
    fn name(&self) -> &str {
        "broken"
    }
    async fn score(&self, _ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        Err(Error::Reward {
            reward: "broken".into(),
            message: "test harness crashed".into(),
            source: None,
        })
    }
}

/// Scores 1 when the finish answer matches the task's `answer` metadata; checks that the
/// sandbox is still alive while scoring.
#[derive(Debug)]
struct AnswerReward;

#[async_trait]
impl RewardSpec for AnswerReward {
    fn name(&self) -> &str {
        "answer"
    }
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        if let Some(d) = ctx.deployment {
            if !d.is_alive().await?.is_alive {
                return Err(Error::internal("sandbox stopped before the reward"));
            }
        }
        let given = match ctx.signal {
            Some(uniagent_core::EpisodeSignal::Finish { answer }) => answer.as_str(),
            _ => "",
        };
        Ok(RewardOutcome::binary(given == "42"))
    }
}

#[tokio::test]
async fn failing_reward_is_a_reward_error_and_a_good_one_scores() {
    let script = || {
        ScriptedChatModel::new(vec![reply(vec![call(
            "c0",
            "finish",
            json!({"answer": "42"}),
        )])])
    };
    let agent = AgentInteraction::new(
        Arc::new(script()),
        vec![Arc::new(finish_tool())],
        LoopConfig::default(),
    )
    .unwrap()
    .with_reward(Arc::new(BrokenReward));
    let t = agent.run(task(), 0, None, &RolloutControl::default()).await;
    assert_eq!(t.exit_reason, ExitReason::RewardError);
    assert!(t.masked && t.reward.is_none() && t.output.reward_score.is_none());
    assert!(t.error.unwrap().contains("test harness crashed"));

    let agent = AgentInteraction::new(
        Arc::new(script()),
        vec![Arc::new(finish_tool())],
        LoopConfig::default(),
    )
    .unwrap()
    .with_reward(Arc::new(AnswerReward));
    let t = agent
        .run(
            task(),
            0,
            Some(Arc::new(ScriptedDeployment::new())),
            &RolloutControl::default(),
        )
        .await;
    assert_eq!(t.exit_reason, ExitReason::Finished);
    assert_eq!(t.output.reward_score, Some(1.0));
    assert!(t.is_success());
}

#[tokio::test]
async fn without_a_reward_spec_there_is_no_sentinel_score() {
    let model = ScriptedChatModel::new(vec![reply(vec![call(
        "c0",
        "finish",
        json!({"answer": "1"}),
    )])]);
    let t = run_with(
        model,
        tools(vec![Arc::new(finish_tool())]),
        LoopConfig::default(),
        None,
    )
    .await;
    assert_eq!(t.output.reward_score, None);
    assert!(t.reward.is_none());
}

#[tokio::test(start_paused = true)]
async fn wall_clock_budget_ends_a_hanging_episode() {
    let model = ScriptedChatModel::new(vec![echo_call("c0"), ScriptedTurn::Hang]);
    let cfg = LoopConfig {
        wall_clock_budget: Some(Duration::from_secs(5)),
        ..LoopConfig::default()
    };
    let start = tokio::time::Instant::now();
    let t = run_echo(model, &echo_tool(), cfg).await;
    assert_eq!(t.exit_reason, ExitReason::WallClockTimeout);
    assert!(t.masked);
    assert!(start.elapsed() >= Duration::from_secs(5) && start.elapsed() < Duration::from_secs(6));
}

/// A task's own limit (`time_limit_sec`, Harbor's `[agent] timeout_sec`) ends the rollout when
/// it is shorter than the configured budget; the configured budget when that is shorter.
#[tokio::test(start_paused = true)]
async fn the_task_time_limit_ends_the_episode_when_it_is_the_shorter() {
    for (task_limit, budget, expected) in [(2.0, 5, 2.0), (10.0, 5, 5.0), (0.5, 3600, 0.5)] {
        let model = ScriptedChatModel::new(vec![echo_call("c0"), ScriptedTurn::Hang]);
        let cfg = LoopConfig {
            wall_clock_budget: Some(Duration::from_secs(budget)),
            ..LoopConfig::default()
        };
        let agent = AgentInteraction::new(Arc::new(model), tools(vec![Arc::new(echo_tool())]), cfg)
            .unwrap();
        let task = Arc::new(
            (*task())
                .clone()
                .with_metadata(uniagent_core::TIME_LIMIT_FIELD, json!(task_limit)),
        );
        let start = tokio::time::Instant::now();
        let t = agent.run(task, 0, None, &RolloutControl::default()).await;
        assert_eq!(t.exit_reason, ExitReason::WallClockTimeout, "{task_limit}");
        let took = start.elapsed();
        let expected = Duration::from_secs_f64(expected);
        assert!(
            took >= expected && took < expected + Duration::from_secs(1),
            "limit {task_limit}, budget {budget}: took {took:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn wall_clock_budget_caps_the_tool_timeout() {
    let slow = Arc::new(SlowTool::default());
    let model = ScriptedChatModel::new(vec![reply(vec![call("a", "slow", json!({}))])]);
    let cfg = LoopConfig {
        tool_timeout: Duration::from_secs(60),
        wall_clock_budget: Some(Duration::from_secs(20)),
        ..LoopConfig::default()
    };
    let t = run_with(model, tools(vec![slow.clone()]), cfg, None).await;
    assert_eq!(t.exit_reason, ExitReason::WallClockTimeout);
    let seen = slow.seen_timeouts.lock().unwrap()[0];
    assert!(seen <= Duration::from_secs(20), "tool got {seen:?}");
}

#[tokio::test(start_paused = true)]
async fn cancellation_ends_a_running_episode() {
    let model = ScriptedChatModel::new(vec![ScriptedTurn::Hang]);
    let agent = AgentInteraction::new(Arc::new(model), vec![], LoopConfig::default()).unwrap();
    let control = RolloutControl {
        cancel: CancellationToken::new(),
        model_permits: None,
    };
    let cancel = control.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let t = agent.run(task(), 3, None, &control).await;
    assert_eq!(t.exit_reason, ExitReason::Cancelled);
    assert_eq!(t.id, "t:3");
    assert!(t.masked);
}

#[tokio::test]
async fn duplicate_tool_names_and_bad_configs_are_rejected() {
    let model = Arc::new(ScriptedChatModel::new(vec![]));
    let err = AgentInteraction::new(
        model.clone(),
        vec![Arc::new(echo_tool()), Arc::new(echo_tool())],
        LoopConfig::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("two tools are named `echo`"));
    let err = AgentInteraction::new(model, vec![], max_turns(0)).unwrap_err();
    assert!(err.to_string().contains("max_turns"));
}
