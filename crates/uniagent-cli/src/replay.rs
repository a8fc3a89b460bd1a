//! The library side of `uniagent replay`: read a cassettes file, rebuild each rollout from
//! its recorded run configuration, replay it and summarise.
//!
//! Every cassette a `run` records (`output.cassettes: true`) carries the run's effective
//! configuration and the path of its config file (`context.config`, `context.config_file`):
//! the model section gives the codec and length limits, the environment section the tools
//! and sandboxes of `--tools live`. Relative paths in it resolve against the config file's
//! directory, as in the run.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use uniagent_core::cassette::{replay, Cassette, Divergence, ReplaySetup, ToolMode};
use uniagent_core::config::ConfigFormat;

use crate::config::{ConfigDoc, RunConfig};
use crate::env::EnvironmentRegistry;
use crate::error::{CliError, Result};

/// Where a replay's observations come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ReplayTools {
    /// The recorded observations; no sandbox, no model.
    Recorded,
    /// The environment's tools, re-run in a fresh sandbox per rollout and compared.
    Live,
}

/// The summary `replay` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplaySummary {
    /// `recorded` or `live`.
    pub tools: ReplayTools,
    /// Cassettes replayed.
    pub replayed: usize,
    /// Cassettes whose replay was identical token for token.
    pub identical: usize,
    /// The others, each with its first divergence.
    pub diverged: Vec<Diverged>,
}

/// One cassette that diverged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diverged {
    /// Its rollout id.
    pub id: String,
    /// The first divergence.
    pub divergence: Divergence,
    /// The same, in words.
    pub message: String,
}

/// Reads every cassette of `path` (JSON lines; blank lines skipped). Bad input names the
/// line.
pub fn read_cassettes(path: &Path) -> Result<Vec<Cassette>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::preflight(format!("reading {}: {e}", path.display())))?;
    let mut cassettes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let c = Cassette::from_json(line)
            .map_err(|e| CliError::preflight(format!("{}:{}: {e}", path.display(), i + 1)))?;
        cassettes.push(c);
    }
    if cassettes.is_empty() {
        return Err(CliError::preflight(format!(
            "{} holds no cassettes",
            path.display()
        )));
    }
    Ok(cassettes)
}

/// The replay setup of a cassette's recorded run.
pub fn setup_for(
    cassette: &Cassette,
    tools: ReplayTools,
    registry: &EnvironmentRegistry,
) -> Result<ReplaySetup> {
    let (config, file) = match (
        cassette.context.get("config"),
        cassette.context.get("config_file").and_then(Value::as_str),
    ) {
        (Some(config), Some(file)) => (config, PathBuf::from(file)),
        _ => {
            return Err(CliError::preflight(format!(
                "cassette `{}` does not carry its run configuration (context.config and context.config_file): record it with `uniagent run` and `output.cassettes: true`",
                cassette.id
            )))
        }
    };
    let text = serde_json::to_string(config)
        .map_err(|e| CliError::runtime(format!("re-encoding a recorded config: {e}")))?;
    let doc = ConfigDoc::from_text(&file, text, ConfigFormat::Json, &[])?;
    let run = RunConfig::from_doc(&doc)?;
    let (codec, limits) = run.model.codec_and_limits()?;
    let tools = match tools {
        ReplayTools::Recorded => ToolMode::Recorded,
        ReplayTools::Live => {
            let parts = registry.build(&doc)?.parts()?;
            ToolMode::Live {
                tools: parts.tools,
                sandboxes: parts.sandboxes,
            }
        }
    };
    Ok(ReplaySetup {
        codec: std::sync::Arc::new(codec),
        limits,
        tools,
    })
}

/// Replays every cassette in order; the setup is rebuilt only when the recorded run changes.
pub async fn replay_all(
    cassettes: &[Cassette],
    tools: ReplayTools,
    registry: &EnvironmentRegistry,
) -> Result<ReplaySummary> {
    let mut summary = ReplaySummary {
        tools,
        replayed: 0,
        identical: 0,
        diverged: Vec::new(),
    };
    let mut current: Option<(&Value, ReplaySetup)> = None;
    for c in cassettes {
        let setup = match &current {
            Some((context, setup)) if **context == c.context => setup.clone(),
            _ => {
                let setup = setup_for(c, tools, registry)?;
                current = Some((&c.context, setup.clone()));
                setup
            }
        };
        let outcome = replay(c, setup)
            .await
            .map_err(|e| CliError::runtime(format!("replaying `{}`: {e}", c.id)))?;
        summary.replayed += 1;
        match outcome.divergence {
            None => summary.identical += 1,
            Some(divergence) => summary.diverged.push(Diverged {
                id: c.id.clone(),
                message: divergence.to_string(),
                divergence,
            }),
        }
    }
    Ok(summary)
}
