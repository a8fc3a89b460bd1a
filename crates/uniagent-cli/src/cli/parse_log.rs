//! `uniagent parse-log --parser NAME --log FILE`: the test statuses the `swebench` package's
//! parser of that name yields for that log, as one JSON object on stdout (`{}` when nothing
//! parses).

use std::path::PathBuf;

use clap::Args;
use uniagent_core::ErrorKind;
use uniagent_rewards::swebench::parse_log_ordered;

use crate::error::{CliError, Result};

/// Arguments of `parse-log`.
#[derive(Debug, Args)]
pub struct ParseLogArgs {
    /// The parser, by the package's name, with or without the `parse_log_` prefix
    /// (`parse_log_pytest`, `django`, ...).
    #[arg(long)]
    pub parser: String,
    /// The test log (UTF-8 text).
    #[arg(long)]
    pub log: PathBuf,
}

/// Runs `parse-log`.
pub(super) fn main(args: ParseLogArgs) -> Result<()> {
    let bytes = std::fs::read(&args.log)
        .map_err(|e| CliError::preflight(format!("reading {}: {e}", args.log.display())))?;
    // The package reads logs as UTF-8 text and raises on anything else.
    let text = String::from_utf8(bytes).map_err(|e| {
        CliError::preflight(format!("{} is not UTF-8 text: {e}", args.log.display()))
    })?;
    let statuses = parse_log_ordered(&args.parser, &text).map_err(|e| match e.kind() {
        // An unknown or non-Python parser name is bad usage; a parser that raises on this log
        // (as the package's own does) is a failure while running.
        ErrorKind::InvalidInput | ErrorKind::NotSupported => {
            CliError::preflight(format!("--parser {}: {e}", args.parser))
        }
        _ => CliError::runtime(format!("{}: {e}", args.log.display())),
    })?;
    let text = serde_json::to_string(&statuses)
        .map_err(|e| CliError::runtime(format!("printing the statuses: {e}")))?;
    println!("{text}");
    Ok(())
}
