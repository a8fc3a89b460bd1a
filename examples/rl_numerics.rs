//! `rl_numerics`: verl 0.9.1's RL numerics on one JSON batch, for scripts.
//!
//! ```sh
//! rl_numerics batch.json        # or: rl_numerics < batch.json
//! ```
//!
//! Input: `{"uid": [str], "scores": [float], "response_mask": [[0|1]], "old_log_prob": [[float]],
//! "log_prob": [[float]], "ref_log_prob": [[float]], "config": {"clip_ratio_low": float,
//! "clip_ratio_high": float, "clip_ratio_c": float}}`.
//!
//! Output (stdout): `{"advantages": {"grpo", "grpo_no_std", "rloo",
//! "reinforce_plus_plus_baseline"}, "policy_loss": {MODE: {AGG: {"loss", "grad_log_prob"}}},
//! "kl": {"k1", "abs", "k2", "k3"}}` for MODE in vanilla, gspo, cispo and the five aggregation
//! modes, the losses using the `grpo` advantages and verl's trainer semantics for one
//! mini-batch on one rank. Conventions: `docs/cli.md`, section `rl_numerics`. A bad batch exits
//! with status 2 and a message on stderr.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use uniagent_train::rl::{rl_report, RlBatch};

fn read_stdin() -> Result<String, String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| format!("reading stdin: {e}"))?;
    Ok(s)
}

/// verl 0.9.1's RL numerics on one JSON batch.
#[derive(Debug, Parser)]
#[command(
    name = "rl_numerics",
    about = "verl 0.9.1's RL numerics on one JSON batch"
)]
struct Args {
    /// The batch as a JSON file; `-` or nothing reads standard input.
    batch: Option<PathBuf>,
}

fn run(args: Args) -> Result<String, String> {
    let text = match args.batch {
        None => read_stdin()?,
        Some(path) if path.as_os_str() == "-" => read_stdin()?,
        Some(path) => std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?,
    };
    let batch: RlBatch =
        serde_json::from_str(&text).map_err(|e| format!("invalid batch JSON: {e}"))?;
    let report = rl_report(&batch).map_err(|e| e.to_string())?;
    serde_json::to_string(&report).map_err(|e| format!("serialising the report: {e}"))
}

fn main() -> ExitCode {
    // clap exits with status 2 on bad usage, as the script conventions ask.
    match run(Args::parse()) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("rl_numerics: {message}");
            ExitCode::from(2)
        }
    }
}
