//! `uniagent train CONFIG [--out DIR] [--set KEY=VALUE]... [--dry-run]`: the run config plus a
//! `trainer:` section, handed to the training pipeline of `uniagent-train`.

use std::path::PathBuf;

use clap::Args;

use crate::env::EnvironmentRegistry;
use crate::error::Result;
use crate::run::{prepare, RunOptions};

/// Arguments of `train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The config file (YAML, TOML or JSON) with a `trainer:` section.
    pub config: PathBuf,
    /// Output directory (trajectories, metrics.jsonl, policy/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override a config value (dotted key), repeatable: `--set trainer.quick=true`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Validate config and dataset, print the first tasks, start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The Prometheus endpoint.
    #[command(flatten)]
    pub metrics: super::metrics::MetricsArgs,
}

/// Runs `train`.
pub(super) fn main(args: TrainArgs, registry: &EnvironmentRegistry) -> Result<()> {
    let options = RunOptions {
        overrides: args.set.clone(),
        out: args.out.clone(),
        ..RunOptions::default()
    };
    let mut prepared = prepare(&args.config, &options, registry)?;
    args.metrics.apply(&mut prepared.config.output)?;
    if prepared.config.trainer.is_none() {
        return Err(prepared.doc.error_at(
            &["trainer".into()],
            "missing section: `train` needs a `trainer:` section (without it, use `uniagent run`)",
        ));
    }
    with_pipeline(prepared, args.dry_run)
}

#[cfg(feature = "tch")]
fn with_pipeline(prepared: crate::run::Prepared, dry_run: bool) -> Result<()> {
    use crate::train::{split_tasks, train, TrainerSection};

    let section = TrainerSection::from_doc(&prepared.doc, &prepared.config)?;
    let phases = split_tasks(&prepared, &section)?;
    if dry_run {
        eprintln!(
            "config OK: {} tasks ({} demonstrated, {} trained on, {} held out), environment `{}`, model `{}`, {} RL steps, output {}",
            prepared.tasks.len(),
            phases.sft.len(),
            phases.rl.len(),
            phases.held_out.len(),
            prepared.environment.name(),
            prepared.config.model.backend(),
            section.pipeline.rl.steps,
            prepared.out.display()
        );
        super::print_tasks(&prepared.tasks, 3);
        return Ok(());
    }
    let output = &prepared.config.output;
    let report = super::runtime()?.block_on(async {
        let exporter = super::metrics::start(output.metrics_addr.as_deref()).await?;
        let report = train(&prepared, &section).await;
        super::metrics::finish(exporter, output.metrics_linger).await;
        report
    })?;
    eprintln!(
        "held-out success {:.1}% after SFT -> {:.1}% after RL; policy in {}",
        report.summary.sft_only_success * 100.0,
        report.summary.rl_success * 100.0,
        report.policy_dir.display()
    );
    println!("{}", report.summary_json);
    Ok(())
}

#[cfg(not(feature = "tch"))]
fn with_pipeline(prepared: crate::run::Prepared, _dry_run: bool) -> Result<()> {
    Err(prepared.doc.error_at(
        &["trainer".into()],
        "this uniagent was built without libtorch: `train` needs `cargo install --path crates/uniagent-cli --features tch`",
    ))
}
