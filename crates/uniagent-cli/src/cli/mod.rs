//! The `uniagent` binary: one module per subcommand. Exit codes: 0 success, 2 bad usage or
//! bad input (one line `error: ...` on stderr), 1 a failure while running.

mod export;
mod gateway;
mod grade;
#[cfg(feature = "k8s")]
mod k8s;
pub mod metrics;
mod oracle;
mod parse_log;
mod replay;
mod report;
mod run;
mod serve;
mod train;
mod view;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::env::EnvironmentRegistry;
use crate::error::{one_line, CliError};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "uniagent",
    version,
    about = "Run and train LLM agents from one config file."
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Evaluate / run inference: every task × sample through the loop, results in --out.
    Run(run::RunArgs),
    /// Train: the same config plus a `trainer:` section.
    Train(train::TrainArgs),
    /// Grade model patches like the SWE-bench harness: each in a fresh sandbox of its task.
    Grade(grade::GradeArgs),
    /// Check Harbor tasks: run each one's `solution/solve.sh` in a fresh sandbox, then its
    /// verifier; a task whose oracle does not score 1 is broken (exit 1).
    Oracle(oracle::OracleArgs),
    /// Print the test statuses a `swebench` log parser yields for a log, as JSON.
    ParseLog(parse_log::ParseLogArgs),
    /// Serve the web viewer over output directories (runs, trajectories, tokens, curves).
    View(view::ViewArgs),
    /// Serve OpenAI/Anthropic endpoints per session over a token-level policy, recording
    /// token-exact trajectories.
    Gateway(gateway::GatewayArgs),
    /// Rebuild recorded rollouts (a run's `cassettes.jsonl`) token for token, with recorded
    /// or live tools, and report the first divergence of each.
    Replay(replay::ReplayArgs),
    /// Write trajectories (`trajectories.jsonl` of run/train outputs) as a Parquet file with
    /// verl's columns, for training with verl on Ray.
    Export(export::ExportArgs),
    /// Serve rollouts to verl's agent loop (the `uniagent-verl` Python package): one rollout
    /// of the config's environment per request, generated through verl's LLM servers.
    Serve(serve::ServeArgs),
    /// Report output directories: tasks, rollouts, strict success, policy vs infrastructure
    /// failures, cost per success; for training runs the curve and the held-out gain.
    Report(report::ReportArgs),
    /// Housekeeping of the `k8s` sandbox backend's claims: `reap --run ID`, `reap --stale`,
    /// `list`.
    #[cfg(feature = "k8s")]
    K8s(k8s::K8sArgs),
}

/// Parses the process arguments and runs; returns the exit code.
pub fn main() -> ExitCode {
    main_with(std::env::args_os(), &EnvironmentRegistry::builtin())
}

/// Runs the command line `args` with the environments of `registry` (so a binary with its
/// own environments is three lines: build a registry, register, call this).
pub fn main_with(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    registry: &EnvironmentRegistry,
) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Run(args) => run::main(args, registry),
        Command::Train(args) => train::main(args, registry),
        Command::Grade(args) => grade::main(args),
        Command::Oracle(args) => oracle::main(args),
        Command::ParseLog(args) => parse_log::main(args),
        Command::View(args) => view::main(args),
        Command::Gateway(args) => gateway::main(args),
        Command::Replay(args) => replay::main(args, registry),
        Command::Export(args) => export::main(args),
        Command::Report(args) => report::main(args),
        Command::Serve(args) => serve::main(args, registry),
        #[cfg(feature = "k8s")]
        Command::K8s(args) => k8s::main(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}

/// A multi-threaded runtime for one command.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::runtime(format!("starting the async runtime: {e}")))
}

/// Prints the first tasks as JSON lines on stdout (`--dry-run`).
pub(crate) fn print_tasks(tasks: &[uniagent_core::Task], n: usize) {
    for task in tasks.iter().take(n) {
        let line = serde_json::json!({"id": task.id, "messages": task.messages});
        println!("{line}");
    }
}

/// Binds `host:port` (0: a free port) and prints `listening on http://HOST:PORT` as the first
/// stdout line (`docs/cli.md`), flushed so that a script can read it at once.
pub(crate) async fn listen(host: &str, port: u16) -> Result<tokio::net::TcpListener, CliError> {
    use std::io::Write;
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| CliError::preflight(format!("cannot listen on {host}:{port}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::runtime(format!("reading the bound address: {e}")))?;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on http://{addr}");
    let _ = out.flush();
    Ok(listener)
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM: the graceful end of the servers.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
