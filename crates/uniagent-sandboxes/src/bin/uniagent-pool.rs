//! `uniagent-pool`: the sandbox pool service of one node (see `uniagent_sandboxes::pool` and
//! `docs/pool-openapi.yaml`).
//!
//! ```text
//! uniagent-pool --config pool.yaml [--host 127.0.0.1] [--port 8700] [--metrics-addr HOST:PORT]
//! ```
//!
//! With `--port 0` it picks a free port. The first line on stdout is always
//! `listening on http://HOST:PORT`; logs go to stderr. SIGTERM or SIGINT drains the node: no
//! new leases (503 `shutting_down`, clients go elsewhere), warm sandboxes removed at once, live
//! leases kept until released or `drain_grace` has passed (a second signal cuts it short); then
//! every sandbox left is removed and it exits 0. After SIGKILL, the next start recovers the
//! leased ones from their container labels. Exit codes: 0 ok, 2 bad usage or configuration, 1 a failure while
//! running.

use std::path::PathBuf;
use std::process::ExitCode;

mod common;

use clap::Parser;
use common::listen::{announce, stop_signals, Listen};
use uniagent_core::config::load;
use uniagent_sandboxes::pool::{Pool, PoolConfig};

#[derive(Debug, Parser)]
#[command(
    name = "uniagent-pool",
    version,
    about = "Sandbox pool: leases of Docker sandboxes over HTTP"
)]
struct Args {
    /// Pool configuration (YAML, TOML or JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    #[command(flatten)]
    listen: Listen<8700>,
    /// Serve Prometheus metrics on `GET /metrics` at HOST:PORT (port 0 picks a free one; the
    /// address is printed on stderr as `metrics on http://HOST:PORT/metrics`).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config: PoolConfig = match load(&args.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {}: {e}", args.config.display());
            return ExitCode::from(2);
        }
    };
    if let Err(e) = config.validate() {
        eprintln!("error: {}: {e}", args.config.display());
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args, config: PoolConfig) -> Result<(), Box<dyn std::error::Error>> {
    let (mut term, mut interrupt) = stop_signals()?;
    let listener = args.listen.bind().await?;
    let pool = Pool::start(config).await?;
    let _exporter = match &args.metrics_addr {
        Some(addr) => {
            let catalogues = [
                uniagent_metrics::CORE_CATALOGUE,
                uniagent_sandboxes::telemetry::CATALOGUE,
            ];
            let exporter = uniagent_metrics::Exporter::start(addr, &catalogues).await?;
            let watched = pool.clone();
            exporter.on_scrape(move || {
                uniagent_sandboxes::telemetry::publish_pool(&watched.capacity())
            });
            eprintln!("{}", uniagent_metrics::announce_line(exporter.addr()));
            Some(exporter)
        }
        None => None,
    };
    announce(&listener, "listening on")?;
    // The first signal starts the drain; the second cuts it short.
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let (second_tx, second_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut senders = [Some(first_tx), Some(second_tx)].into_iter().flatten();
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            match senders.next() {
                Some(tx) => {
                    let _ = tx.send(());
                }
                None => return,
            }
        }
    });
    pool.serve_with_drain(
        listener,
        async move {
            let _ = first_rx.await;
        },
        async move {
            let _ = second_rx.await;
        },
    )
    .await?;
    Ok(())
}
