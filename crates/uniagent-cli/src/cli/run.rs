//! `uniagent run CONFIG [--out DIR] [--limit N] [--concurrency N] [--set KEY=VALUE]... [--dry-run]`

use std::path::PathBuf;

use clap::Args;
use uniagent_core::agent::CancellationToken;

use crate::env::EnvironmentRegistry;
use crate::error::{CliError, Result};
use crate::run::{execute, prepare, RunOptions};

/// Arguments of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The config file (YAML, TOML or JSON).
    pub config: PathBuf,
    /// Output directory (default: `output.dir`, else `runs/<config name>`); rerunning with the
    /// same directory resumes.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only the first N tasks.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Rollouts (sandboxes) at once.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Override a config value (dotted key), repeatable: `--set runner.samples_per_task=4`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Validate config and dataset, print the first tasks, start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// The Prometheus endpoint.
    #[command(flatten)]
    pub metrics: super::metrics::MetricsArgs,
}

impl RunArgs {
    pub(crate) fn options(&self) -> RunOptions {
        RunOptions {
            overrides: self.set.clone(),
            out: self.out.clone(),
            limit: self.limit,
            concurrency: self.concurrency,
            progress: !self.quiet,
        }
    }
}

/// Runs `run`.
pub(super) fn main(args: RunArgs, registry: &EnvironmentRegistry) -> Result<()> {
    let options = args.options();
    let mut prepared = prepare(&args.config, &options, registry)?;
    args.metrics.apply(&mut prepared.config.output)?;
    if args.dry_run {
        eprintln!(
            "config OK: {} tasks, environment `{}`, model `{}`, {} samples per task, output {}",
            prepared.tasks.len(),
            prepared.environment.name(),
            prepared.config.model.backend(),
            prepared.config.runner.samples_per_task,
            prepared.out.display()
        );
        super::print_tasks(&prepared.tasks, 3);
        return Ok(());
    }
    let rt = super::runtime()?;
    let summary = rt.block_on(async {
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted: stopping running rollouts and their sandboxes...");
                on_signal.cancel();
            }
        });
        let output = &prepared.config.output;
        let exporter = super::metrics::start(output.metrics_addr.as_deref()).await?;
        let result = execute(&prepared, None, &cancel, &options).await;
        watcher.abort();
        super::metrics::finish(exporter, output.metrics_linger).await;
        result
    })?;
    let text = serde_json::to_string(&summary)
        .map_err(|e| CliError::runtime(format!("printing the summary: {e}")))?;
    println!("{text}");
    Ok(())
}
