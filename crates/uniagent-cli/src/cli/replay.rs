//! `uniagent replay FILE [--tools recorded|live]`: rebuild recorded rollouts token for token
//! and print `{"tools", "replayed", "identical", "diverged": [{id, divergence, message}]}`.
//! Exit 0 when every replay is identical, 1 when any diverged, 2 on bad input.

use std::path::PathBuf;

use clap::Args;

use crate::env::EnvironmentRegistry;
use crate::error::{CliError, Result};
use crate::replay::{read_cassettes, replay_all, ReplayTools};

/// Arguments of `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A cassettes file: the `cassettes.jsonl` of a run with `output.cassettes: true`, or of
    /// `gateway --out DIR --cassettes`.
    pub file: PathBuf,
    /// `recorded`: answer tool calls with the recorded observations (no model, no sandbox);
    /// `live`: re-run the tools in a fresh sandbox of the recorded environment and report the
    /// first observation that differs (loop cassettes only: a gateway's harness ran its
    /// tools).
    #[arg(long, value_enum, default_value_t = ReplayTools::Recorded)]
    pub tools: ReplayTools,
}

/// Runs `replay`.
pub(super) fn main(args: ReplayArgs, registry: &EnvironmentRegistry) -> Result<()> {
    let cassettes = read_cassettes(&args.file)?;
    let rt = super::runtime()?;
    let summary = rt.block_on(replay_all(&cassettes, args.tools, registry))?;
    let text = serde_json::to_string(&summary)
        .map_err(|e| CliError::runtime(format!("printing the summary: {e}")))?;
    println!("{text}");
    if summary.diverged.is_empty() {
        Ok(())
    } else {
        Err(CliError::runtime(format!(
            "{} of {} replays diverged; first: {}: {}",
            summary.diverged.len(),
            summary.replayed,
            summary.diverged[0].id,
            summary.diverged[0].message
        )))
    }
}
