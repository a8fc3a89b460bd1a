//! Load bench: `uniagent run` (the library path the binary takes: config → file-lookup
//! environment → Runner → trajectories.jsonl) with a scripted model, N host sandboxes
//! (default 1,000) at once. The model holds every rollout's first turn until all N have
//! started, so N sandboxes are provably alive together; then each rollout reads its file and
//! finishes.
//!
//! Reports rollouts/s, the peak number of rollouts inside the loop at once, peak RSS of this
//! process and the peak summed RSS of the sandbox processes; the baseline is the same
//! rollouts through `uniagent_core::runner::Runner` directly (no config, no output file),
//! measured in the same process, and the ratio says what the CLI layer costs.
//!
//! ```sh
//! cargo bench -p uniagent-cli --bench load                     # 1,000 sandboxes
//! UNIAGENT_LOAD_ROLLOUTS=200 cargo bench -p uniagent-cli --bench load
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::Notify;
use uniagent_cli::run::{execute, prepare, RunOptions};
use uniagent_core::agent::{AgentInteraction, CancellationToken};
use uniagent_core::runner::{Runner, RunnerConfig};
use uniagent_core::{
    AssistantTurn, ChatModel, FinishReason, Message, Result, Role, RolloutCache, SamplingParams,
    Task, ToolCall,
};
use uniagent_envs::EnvironmentRegistry;

/// Reads the asked file, then finishes with its digits; the first turn waits until every
/// rollout has reached its own.
#[derive(Debug)]
struct FileReader {
    expected: usize,
    started: AtomicUsize,
    in_loop: AtomicUsize,
    peak: AtomicUsize,
    all_started: Notify,
}

impl FileReader {
    fn new(expected: usize) -> Self {
        Self {
            expected,
            started: AtomicUsize::new(0),
            in_loop: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            all_started: Notify::new(),
        }
    }
}

#[async_trait]
impl ChatModel for FileReader {
    fn name(&self) -> &str {
        "scripted-file-reader"
    }
    async fn query(
        &self,
        cache: &mut RolloutCache,
        _sampling: &SamplingParams,
    ) -> Result<AssistantTurn> {
        let last_tool = cache
            .messages()
            .iter()
            .rev()
            .find(|m| m.role == Role::Tool)
            .map(|m| m.text().to_owned());
        let call = match last_tool {
            None => {
                // A rollout is in the loop from its first turn to its last.
                let now = self.in_loop.fetch_add(1, Ordering::SeqCst) + 1;
                self.peak.fetch_max(now, Ordering::SeqCst);
                let wait = self.all_started.notified();
                if self.started.fetch_add(1, Ordering::SeqCst) + 1 >= self.expected {
                    self.all_started.notify_waiters();
                }
                if self.started.load(Ordering::SeqCst) < self.expected {
                    let _ = tokio::time::timeout(Duration::from_secs(1800), wait).await;
                }
                let question = cache
                    .messages()
                    .iter()
                    .find(|m| m.role == Role::User)
                    .map(|m| m.text().to_owned())
                    .unwrap_or_default();
                let target = question
                    .split("code of ")
                    .nth(1)
                    .and_then(|s| s.split('?').next())
                    .unwrap_or("x")
                    .to_owned();
                ToolCall::new(
                    "c0",
                    "execute_bash",
                    json!({"command": format!("cat data/{target}.txt")}),
                )
            }
            Some(out) => {
                self.in_loop.fetch_sub(1, Ordering::SeqCst);
                let answer: String = out.chars().filter(char::is_ascii_digit).collect();
                ToolCall::new("c1", "finish", json!({"answer": answer}))
            }
        };
        let message = Message::assistant_with_calls(None, vec![call]);
        cache.push_message(message.clone());
        Ok(AssistantTurn {
            message,
            finish_reason: FinishReason::ToolCalls,
            format_error: None,
            sampled_tokens: 0,
        })
    }
}

fn kib_of(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Samples the summed RSS of the marked sandbox processes every 200 ms; returns the peak.
fn watch_sandboxes(mark: String, stop: Arc<Mutex<bool>>) -> std::thread::JoinHandle<(u64, usize)> {
    std::thread::spawn(move || {
        let (mut peak_kib, mut peak_n) = (0u64, 0usize);
        let mut last_print = Instant::now();
        while !*stop.lock().unwrap() {
            let pids =
                uniagent_sandboxes::host::marked_processes(&format!("UNIAGENT_LOAD_MARK={mark}"));
            let total: u64 = pids
                .iter()
                .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
                .map(|s| kib_of(&s, "VmRSS:"))
                .sum();
            peak_kib = peak_kib.max(total);
            peak_n = peak_n.max(pids.len());
            if last_print.elapsed() > Duration::from_secs(30) {
                eprintln!(
                    "  ... {} sandbox processes alive, {:.0} MiB",
                    pids.len(),
                    total as f64 / 1024.0
                );
                last_print = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        (peak_kib, peak_n)
    })
}

/// How the CLI run's rollouts ended, and where their time went (each line's `timings`, in
/// seconds: median, p90 and max over the rollouts); the sandboxes' peak RSS per rollout.
fn where_the_time_goes(trajectories: &std::path::Path, sandbox_rss_kib: u64, n: usize) {
    let text = std::fs::read_to_string(trajectories).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut endings = std::collections::BTreeMap::<String, usize>::new();
    for line in &lines {
        let reason = line["exit_reason"].as_str().unwrap_or("?").to_owned();
        *endings.entry(reason).or_default() += 1;
    }
    println!("  endings: {endings:?}");
    println!("  where a rollout's time goes (s): median / p90 / max");
    for key in [
        "sandbox_start",
        "model",
        "tools",
        "reward",
        "sandbox_stop",
        "total",
    ] {
        let mut values: Vec<f64> = lines
            .iter()
            .filter_map(|l| l["timings"][key].as_f64())
            .collect();
        if values.is_empty() {
            continue;
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        println!(
            "    {key:<13} {:>8.2} {:>8.2} {:>8.2}",
            at(0.5),
            at(0.9),
            at(1.0)
        );
    }
    println!(
        "  sandbox RSS at the peak per rollout: {:.1} MiB",
        sandbox_rss_kib as f64 / 1024.0 / n as f64
    );
}

fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    raise_fd_limit();
    let n: usize = std::env::var("UNIAGENT_LOAD_ROLLOUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("load-{}", std::process::id());
    let config = format!(
        "tasks:\n  generate: {{count: {n}, seed: 11}}\n\
environment:\n  type: file-lookup\n  bash_timeout: 60\n  setup_timeout: 120\n  sandbox:\n    type: host\n    startup_timeout: 120\n    env: {{UNIAGENT_LOAD_MARK: \"{mark}\"}}\n\
model:\n  type: openai\n  http: {{endpoints: [\"http://127.0.0.1:9/v1\"], model: unused}}\n\
loop:\n  max_turns: 4\n  tool_timeout: 120\n  wall_clock_budget: 3000\n\
runner:\n  max_concurrent_rollouts: {n}\n  max_concurrent_model_calls: {n}\n  max_concurrent_sandbox_starts: 32\n  sandbox_stop_timeout: 120\n"
    );
    let path = dir.path().join("load.yaml");
    std::fs::write(&path, config).unwrap();
    let options = RunOptions {
        out: Some(dir.path().join("out")),
        ..RunOptions::default()
    };
    let prepared = prepare(&path, &options, &EnvironmentRegistry::builtin()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // Baseline: the same environment parts straight through the core Runner
    // (`UNIAGENT_LOAD_BASELINE=0` skips it).
    let with_baseline = std::env::var("UNIAGENT_LOAD_BASELINE").map_or(true, |v| v != "0");
    let (parts, loop_config, runner_config) = prepared.rollout_parts().unwrap();
    let model = Arc::new(FileReader::new(n));
    let mut agent = AgentInteraction::new(model.clone(), parts.tools.clone(), loop_config).unwrap();
    if let Some(r) = &parts.reward {
        agent = agent.with_reward(Arc::clone(r));
    }
    let factory = parts.sandboxes.clone().unwrap();
    let runner = Runner::new(agent, RunnerConfig { ..runner_config })
        .unwrap()
        .with_sandboxes(move |t: &Task| factory.create(t));
    let stop = Arc::new(Mutex::new(false));
    let watcher = watch_sandboxes(mark.clone(), Arc::clone(&stop));
    let baseline_tasks = if with_baseline {
        prepared.tasks.clone()
    } else {
        Vec::new()
    };
    let t0 = Instant::now();
    let mut sink = Vec::new();
    let base_summary = rt
        .block_on(runner.run(baseline_tasks, &CancellationToken::new(), &mut sink))
        .unwrap();
    let base_secs = t0.elapsed().as_secs_f64();
    *stop.lock().unwrap() = true;
    let (base_rss, base_alive) = watcher.join().unwrap();
    let base_peak = model.peak.load(Ordering::SeqCst);

    // The CLI path.
    let model = Arc::new(FileReader::new(n));
    let stop = Arc::new(Mutex::new(false));
    let watcher = watch_sandboxes(mark.clone(), Arc::clone(&stop));
    let t0 = Instant::now();
    let summary = rt
        .block_on(execute(
            &prepared,
            Some(model.clone() as Arc<dyn ChatModel>),
            &CancellationToken::new(),
            &options,
        ))
        .unwrap();
    let cli_secs = t0.elapsed().as_secs_f64();
    *stop.lock().unwrap() = true;
    let (cli_rss, cli_alive) = watcher.join().unwrap();
    let cli_peak = model.peak.load(Ordering::SeqCst);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();

    println!(
        "load bench: {n} rollouts, {n} at once, host sandboxes, scripted model (2 turns each)"
    );
    if with_baseline {
        println!(
            "  baseline (core Runner): {:>7.1} rollouts/s  {:>6.1} s  solved {}/{}  peak in loop {}  peak sandbox processes {}  sandbox RSS peak {:.0} MiB",
            n as f64 / base_secs, base_secs, base_summary.succeeded, base_summary.rollouts, base_peak, base_alive, base_rss as f64 / 1024.0
        );
    }
    println!(
        "  uniagent run:           {:>7.1} rollouts/s  {:>6.1} s  solved {}/{}  peak in loop {}  peak sandbox processes {}  sandbox RSS peak {:.0} MiB",
        n as f64 / cli_secs, cli_secs, summary.succeeded, summary.rollouts, cli_peak, cli_alive, cli_rss as f64 / 1024.0
    );
    if with_baseline {
        println!(
            "  ratio uniagent run / baseline time: {:.2}",
            cli_secs / base_secs
        );
    }
    println!(
        "  this process: peak RSS {:.0} MiB (VmHWM), now {:.0} MiB",
        kib_of(&status, "VmHWM:") as f64 / 1024.0,
        kib_of(&status, "VmRSS:") as f64 / 1024.0
    );
    where_the_time_goes(&dir.path().join("out/trajectories.jsonl"), cli_rss, n);
    assert_eq!(summary.rollouts as usize, n);
    assert_eq!(cli_peak, n, "not every rollout was in the loop at once");
    let left = uniagent_sandboxes::host::marked_processes(&format!("UNIAGENT_LOAD_MARK={mark}"));
    assert!(left.is_empty(), "{} sandbox processes left", left.len());
}
