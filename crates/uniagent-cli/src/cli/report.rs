//! `uniagent report DIR... [--json]`: the report of output directories of `run`, `train` or
//! the gateway (`uniagent_cli::report`): tasks attempted, rollouts, strict success rate, policy
//! versus infrastructure failures by exit reason, and per success the tokens generated, tool
//! calls and wall time; for training runs also the learning curve and the held-out gain. A
//! table with one column per DIR, or with `--json` a JSON array with one object per DIR.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::error::{CliError, Result};
use crate::report::{render_table, Report, ReportError};

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Output directories (or their `trajectories.jsonl` files).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Print JSON (an array, one object per DIR: `dir` and the report's fields) instead of
    /// the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Named<'a> {
    dir: String,
    #[serde(flatten)]
    report: &'a Report,
}

/// Runs `report`.
pub(super) fn main(args: ReportArgs) -> Result<()> {
    let reports = args
        .dirs
        .iter()
        .map(|d| Report::from_dir(d).map_err(error))
        .collect::<Result<Vec<Report>>>()?;
    let names: Vec<String> = args.dirs.iter().map(|d| d.display().to_string()).collect();
    if args.json {
        let named: Vec<Named<'_>> = names
            .iter()
            .zip(&reports)
            .map(|(dir, report)| Named {
                dir: dir.clone(),
                report,
            })
            .collect();
        let text = serde_json::to_string_pretty(&named)
            .map_err(|e| CliError::runtime(format!("encoding the report: {e}")))?;
        println!("{text}");
    } else {
        let refs: Vec<&Report> = reports.iter().collect();
        print!("{}", render_table(&names, &refs));
    }
    Ok(())
}

/// A missing directory is bad input (exit 2); an unreadable file a failure (exit 1).
fn error(e: ReportError) -> CliError {
    match e {
        ReportError::NoTrajectories { .. } => CliError::preflight(e.to_string()),
        _ => CliError::runtime(e.to_string()),
    }
}
