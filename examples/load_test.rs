//! Load test of the interaction loop and the runner (a binary, not a timed test).
//!
//! Runs N concurrent rollouts (default 10,000) of a scripted policy that calls an in-process tool
//! for `--turns - 1` turns and then finishes, so every microsecond measured is framework
//! overhead: the loop, the token-level model with its codec (Qwen2.5's tokenizer and chat
//! template: tokenizing observations, parsing tool calls), the rollout cache, the runner, the
//! summary. `--message-level` leaves the codec out. Reports rollouts/s, peak RSS and per-turn
//! overhead (process CPU time per turn and wall time per turn).
//!
//! ```text
//! cargo run --release -p uniagent-examples --bin load-test -- --rollouts 10000 --turns 5
//! ```
//! `--metrics-addr 127.0.0.1:0` records and serves the metrics during the run;
//! `scripts/bench/metrics-overhead.sh` compares runs with and without it.
//! Ctrl-C cancels the run cleanly; the summary still prints.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use uniagent_core::agent::{
    AgentInteraction, CancellationToken, ExitReason, LoopConfig, TokenChatModel, Trajectory,
};
use uniagent_core::codec::Codec;
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::runner::{ProgressEvent, Runner, RunnerConfig, TrajectorySink};
use uniagent_core::testing::{
    RecordingTool, ScriptedChatModel, ScriptedTokenGenerator, ScriptedTurn,
};
use uniagent_core::{
    ChatModel, Deployment, DeploymentExt, EpisodeSignal, Error, LengthLimits, Message, Result,
    Task, Tool, ToolCall, ToolContext, ToolOutput, ToolSpec,
};
use uniagent_sandboxes::{HostConfig, HostDeployment};

/// The Qwen2.5 tokenizer and chat template the core's tests use.
const QWEN25_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crates/uniagent-core/tests/fixtures/tokenizers/qwen2.5"
);

/// Load test of the interaction loop and the runner.
#[derive(Debug, Parser)]
#[command(
    name = "load-test",
    about = "Load test of the interaction loop and the runner"
)]
struct Args {
    /// Concurrent rollouts.
    #[arg(long, default_value_t = 10_000, value_parser = positive())]
    rollouts: usize,
    /// Turns per rollout (tool turns plus the final answer).
    #[arg(long, default_value_t = 5, value_parser = positive())]
    turns: usize,
    /// Drive a message-level scripted model instead of the token-level one.
    #[arg(long)]
    message_level: bool,
    /// The token-level policy's tokenizer and chat template (a Hugging Face model directory).
    #[arg(long, default_value = QWEN25_FIXTURE)]
    tokenizer_dir: std::path::PathBuf,
    /// Run every rollout in its own real host sandbox (`uniagent-sandbox` child process), with
    /// at most this many sandboxes at once; the tool runs `echo` in the sandbox's bash session.
    #[arg(long, value_parser = positive())]
    host_sandboxes: Option<usize>,
    /// Record the metrics and serve them on `GET /metrics` at HOST:PORT, rendered once a
    /// second as a scraper would (for the overhead of metrics; compare with a run without).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
}

/// Parses a positive integer flag value.
fn positive() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

/// Echoes its text through the rollout's bash session.
#[derive(Debug)]
struct SandboxEcho;

#[async_trait::async_trait]
impl Tool for SandboxEcho {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "echo",
            "Echo a text in the sandbox.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        )
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<ToolOutput> {
        let text = args["text"].as_str().unwrap_or_default();
        let sandbox = ctx.require_deployment("echo")?;
        let command = format!("echo '{text}'");
        let out = sandbox.bash(&ctx.session, &command, ctx.timeout).await?;
        Ok(ToolOutput::success(out.output))
    }
}

/// Counts trajectories without keeping them.
#[derive(Default)]
struct CountingSink {
    bytes: u64,
}

impl TrajectorySink for CountingSink {
    fn write(&mut self, t: &Trajectory) -> Result<()> {
        // Serialise like a JSONL sink would, so the cost is part of the measurement.
        let line = serde_json::to_vec(t).map_err(|e| Error::internal(e.to_string()))?;
        self.bytes += line.len() as u64 + 1;
        Ok(())
    }
}

/// Peak resident set size in KiB (`VmHWM`), where /proc is available.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time of all threads of this process in nanoseconds (from /proc/self/task/*/schedstat).
fn process_cpu_ns() -> Option<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(entry.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn script(turns: usize) -> Vec<ScriptedTurn> {
    let mut script: Vec<ScriptedTurn> = (0..turns - 1)
        .map(|i| {
            ScriptedTurn::Reply(Message::assistant_with_calls(
                Some(format!("step {i}")),
                vec![ToolCall::new(
                    format!("c{i}"),
                    "echo",
                    json!({"text": format!("observation {i}")}),
                )],
            ))
        })
        .collect();
    script.push(ScriptedTurn::Reply(Message::assistant_with_calls(
        None,
        vec![ToolCall::new("done", "finish", json!({"answer": "ok"}))],
    )));
    script
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let exporter = match &args.metrics_addr {
        Some(addr) => {
            let exporter =
                uniagent_metrics::Exporter::start(addr, &[uniagent_metrics::CORE_CATALOGUE])
                    .await
                    .map_err(|e| Error::config(e.to_string()))?;
            Some(Arc::new(exporter))
        }
        None => None,
    };
    let scraper = exporter.clone().map(|exporter| {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                std::hint::black_box(exporter.render());
            }
        })
    });
    let model: Arc<dyn ChatModel> = if args.message_level {
        Arc::new(ScriptedChatModel::new(script(args.turns)).without_recording())
    } else {
        let codec = Arc::new(
            Codec::from_dir(&args.tokenizer_dir)?.with_tool_parser(ToolCallFormat::Hermes),
        );
        let generator =
            ScriptedTokenGenerator::new(codec.clone(), script(args.turns)).without_recording();
        Arc::new(TokenChatModel::new(
            Arc::new(generator),
            codec,
            LengthLimits::default(),
        ))
    };
    let echo: Arc<dyn Tool> = if args.host_sandboxes.is_some() {
        Arc::new(SandboxEcho)
    } else {
        Arc::new(RecordingTool::new("echo", |a| {
            Ok(ToolOutput::success(a["text"].as_str().unwrap_or_default()))
        }))
    };
    let finish = RecordingTool::new("finish", |a| {
        let answer = a["answer"].as_str().unwrap_or_default().to_owned();
        Ok(ToolOutput::success("done").with_signal(EpisodeSignal::Finish { answer }))
    });
    let loop_cfg = LoopConfig {
        max_turns: args.turns as u32 + 1,
        ..LoopConfig::default()
    };
    let agent = AgentInteraction::new(model, vec![echo, Arc::new(finish)], loop_cfg)?;
    let runner_cfg = RunnerConfig {
        max_concurrent_rollouts: args.host_sandboxes.unwrap_or(args.rollouts),
        max_concurrent_model_calls: args.rollouts,
        ..RunnerConfig::default()
    };

    let bar = ProgressBar::new(args.rollouts as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let running = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let exits: Arc<Mutex<BTreeMap<ExitReason, u64>>> = Arc::default();
    let (pb, run_c, fail_c, exit_c) = (bar.clone(), running.clone(), failed.clone(), exits.clone());
    let mut runner = Runner::new(agent, runner_cfg)?;
    if args.host_sandboxes.is_some() {
        runner = runner.with_sandboxes(|_task: &Task| {
            Ok(Box::new(HostDeployment::new(HostConfig::default())) as Box<dyn Deployment>)
        });
    }
    let runner = runner.with_progress(move |e| match e {
        ProgressEvent::Started { .. } => {
            run_c.fetch_add(1, Ordering::Relaxed);
        }
        ProgressEvent::Finished { exit_reason, .. } => {
            run_c.fetch_sub(1, Ordering::Relaxed);
            if !exit_reason.is_success_path() {
                fail_c.fetch_add(1, Ordering::Relaxed);
            }
            let mut exits = exit_c
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *exits.entry(*exit_reason).or_default() += 1;
            pb.inc(1);
            if pb.position() % 100 == 0 || pb.position() == pb.length().unwrap_or(0) {
                let (r, f) = (
                    run_c.load(Ordering::Relaxed),
                    fail_c.load(Ordering::Relaxed),
                );
                let counts: Vec<String> = exits.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                pb.set_message(format!("running {r} failed {f} | {}", counts.join(" ")));
            }
        }
    });

    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let tasks: Vec<Task> = (0..args.rollouts)
        .map(|i| Task::new(format!("load-{i}"), vec![Message::user("count to five")]))
        .collect();
    let cpu0 = process_cpu_ns();
    let t0 = Instant::now();
    let mut sink = CountingSink::default();
    let summary = runner.run(tasks, &cancel, &mut sink).await?;
    let wall = t0.elapsed();
    let cpu = process_cpu_ns().zip(cpu0).map(|(a, b)| a.saturating_sub(b));
    bar.finish_and_clear();

    let turns = summary.turns.total.max(1.0);
    let report = json!({
        "rollouts": summary.rollouts,
        "finished": summary.exit_reasons[&ExitReason::Finished],
        "cancelled": summary.exit_reasons[&ExitReason::Cancelled],
        "turns_total": summary.turns.total,
        "token_level": !args.message_level,
        "host_sandboxes": args.host_sandboxes,
        "wall_s": wall.as_secs_f64(),
        "rollouts_per_s": summary.rollouts as f64 / wall.as_secs_f64(),
        "peak_rss_mib": peak_rss_kib().map(|k| k as f64 / 1024.0),
        "cpu_us_per_turn": cpu.map(|ns| ns as f64 / 1000.0 / turns),
        "wall_us_per_turn": wall.as_secs_f64() * 1e6 / turns,
        "jsonl_bytes": sink.bytes,
        "metrics": args.metrics_addr.is_some(),
    });
    if let Some(scraper) = scraper {
        scraper.abort();
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    Ok(())
}
