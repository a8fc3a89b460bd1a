//! `uniagent export --format verl --out FILE.parquet TRAJECTORIES... [--phase NAME]...`:
//! trajectories of `run` / `train` output directories as one Parquet file that verl's agent
//! loop post-processing loads (`uniagent_train::export::verl`; feature `parquet`). Prints the
//! summary (`rows`, `dropped`, `rows_with_logprobs`, `max_prompt_len`, `max_response_len`,
//! `out`) as one JSON object on stdout.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::error::{CliError, Result};

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// verl 0.9.1's `AgentLoopOutput` columns plus `uid` (the task id, GRPO's group key), `id`,
    /// `exit_reason`, `weight_versions` and `step`.
    Verl,
}

/// Arguments of `export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// `trajectories.jsonl` files, or output directories holding one.
    #[arg(required = true, value_name = "TRAJECTORIES")]
    pub inputs: Vec<PathBuf>,
    /// The format of the output file.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// The Parquet file to write (replaced if it exists; written only when the export succeeds).
    #[arg(long)]
    pub out: PathBuf,
    /// Only lines of this phase (`rl`, `eval`, `demonstration`: the `phase` that `train`
    /// writes), repeatable; lines without a phase (`run` output) then do not match.
    #[arg(long, value_name = "NAME")]
    pub phase: Vec<String>,
    /// Write rows with and without logprobs into one file (verl then needs them in separate
    /// batches); refused by default.
    #[arg(long)]
    pub allow_mixed_logprobs: bool,
}

/// Runs `export`.
pub(super) fn main(args: ExportArgs) -> Result<()> {
    match args.format {
        ExportFormat::Verl => verl(&args),
    }
}

#[cfg(feature = "parquet")]
fn verl(args: &ExportArgs) -> Result<()> {
    use uniagent_core::ErrorKind;
    use uniagent_train::export::{read_jsonl, verl};

    // Bad or unreadable input exits 2; failing to write the output exits 1.
    let input = CliError::preflight;
    let files: Vec<PathBuf> = args
        .inputs
        .iter()
        .map(|p| {
            if p.is_dir() {
                p.join(crate::output::TRAJECTORIES)
            } else {
                p.clone()
            }
        })
        .collect();
    let options = verl::VerlOptions {
        mixed_logprobs: if args.allow_mixed_logprobs {
            verl::MixedLogprobs::Allow
        } else {
            verl::MixedLogprobs::Refuse
        },
        ..verl::VerlOptions::default()
    };
    let mut writer = verl::VerlWriter::create(&args.out, options).map_err(CliError::runtime)?;
    let mut skipped_phase = 0usize;
    for file in &files {
        for line in read_jsonl(file).map_err(input)? {
            let line = line.map_err(input)?;
            if !args.phase.is_empty()
                && !line.phase.as_ref().is_some_and(|p| args.phase.contains(p))
            {
                skipped_phase += 1;
                continue;
            }
            writer
                .push(&line.trajectory, line.step)
                .map_err(|e| match e.kind() {
                    ErrorKind::InvalidInput => {
                        CliError::preflight(format!("{}:{}: {e}", file.display(), line.line))
                    }
                    _ => CliError::runtime(e),
                })?;
        }
    }
    let summary = writer.finish().map_err(CliError::runtime)?;
    eprintln!(
        "{} rows to {} ({} dropped as infrastructure failures, {} of another phase); verl needs rollout.prompt_length >= {} and rollout.response_length >= {}",
        summary.rows,
        args.out.display(),
        summary.dropped,
        skipped_phase,
        summary.max_prompt_len,
        summary.max_response_len
    );
    let mut json = serde_json::to_value(summary)
        .map_err(|e| CliError::runtime(format!("printing the summary: {e}")))?;
    json["out"] = args.out.display().to_string().into();
    println!("{json}");
    Ok(())
}

#[cfg(not(feature = "parquet"))]
fn verl(_args: &ExportArgs) -> Result<()> {
    Err(CliError::preflight(
        "this uniagent was built without the `parquet` feature: `export` needs it",
    ))
}
