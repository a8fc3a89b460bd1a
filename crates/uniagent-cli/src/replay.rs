//! The library side of `uniagent replay`: read a cassettes file, rebuild each rollout from
//! its recorded run configuration, replay it and summarise.
//!
//! A file may hold loop cassettes (`uniagent run`) and gateway cassettes (`uniagent gateway
//! --out DIR --cassettes`, told apart by `"kind": "gateway"`). A gateway cassette is replayed
//! by sending its recorded request bodies to a fresh gateway over the recorded generator
//! outputs, with the codec of its `context.codec_dir` (see uniagent-gateway's `cassette`
//! module). Its tools ran in the harness, so there is nothing to re-run: `--tools live` on a
//! file with gateway cassettes is an input error.
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
use uniagent_core::codec::Codec;
use uniagent_core::config::ConfigFormat;
use uniagent_core::formats::cassettes::{self, CassetteKind};
use uniagent_gateway::cassette::{GatewayCassette, GatewayDivergence};

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
pub(crate) struct ReplaySummary {
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
pub(crate) struct Diverged {
    /// Its rollout id (a gateway cassette: the session id).
    pub id: String,
    /// The first divergence.
    pub divergence: AnyDivergence,
    /// The same, in words.
    pub message: String,
}

/// The first divergence of a loop or a gateway replay (serialized as the inner value, both
/// tagged by `kind`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum AnyDivergence {
    /// A loop cassette's.
    Loop(Divergence),
    /// A gateway cassette's.
    Gateway(GatewayDivergence),
}

impl std::fmt::Display for AnyDivergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Loop(d) => d.fmt(f),
            Self::Gateway(d) => d.fmt(f),
        }
    }
}

/// One line of a cassettes file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AnyCassette {
    /// A rollout of `uniagent run`.
    Loop(Box<Cassette>),
    /// A session of `uniagent gateway`.
    Gateway(Box<GatewayCassette>),
}

impl AnyCassette {
    /// The rollout or session id.
    pub(crate) fn id(&self) -> &str {
        match self {
            Self::Loop(c) => &c.id,
            Self::Gateway(c) => &c.id,
        }
    }
}

/// Reads every cassette of `path` (JSON lines; blank lines skipped), loop or gateway by each
/// line's `kind` (uniagent-core's [`formats::cassettes`](uniagent_core::formats::cassettes)
/// reads the envelope). Bad input names the line.
pub(crate) fn read_cassettes(path: &Path) -> Result<Vec<AnyCassette>> {
    let lines = cassettes::read(path).map_err(|e| CliError::preflight(e.to_string()))?;
    let mut read = Vec::new();
    for line in lines {
        let line = line.map_err(|e| CliError::preflight(e.to_string()))?;
        let bad = |e: String| CliError::preflight(format!("{}:{}: {e}", path.display(), line.line));
        read.push(match line.kind {
            CassetteKind::Gateway => AnyCassette::Gateway(Box::new(
                GatewayCassette::from_value(line.value).map_err(|e| bad(e.to_string()))?,
            )),
            CassetteKind::Loop => AnyCassette::Loop(Box::new(
                Cassette::from_value(line.value).map_err(|e| bad(e.to_string()))?,
            )),
        });
    }
    if read.is_empty() {
        return Err(CliError::preflight(format!(
            "{} holds no cassettes",
            path.display()
        )));
    }
    Ok(read)
}

/// The replay setup of a cassette's recorded run.
pub(crate) fn setup_for(
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

/// The codec of a gateway cassette's recording gateway: `context.codec_dir` (the model
/// directory or the server's tokenizer directory, as `uniagent gateway` records it).
pub(crate) fn gateway_codec(cassette: &GatewayCassette) -> Result<Codec> {
    let Some(dir) = cassette.context.get("codec_dir").and_then(Value::as_str) else {
        return Err(CliError::preflight(format!(
            "gateway cassette `{}` does not name its codec directory (context.codec_dir): record it with `uniagent gateway --out DIR --cassettes`",
            cassette.id
        )));
    };
    Codec::from_dir(dir).map_err(|e| {
        CliError::preflight(format!(
            "gateway cassette `{}`: cannot load the codec of {dir}: {e}",
            cassette.id
        ))
    })
}

/// Replays every cassette in order; a loop cassette's setup is rebuilt only when the
/// recorded run changes. `--tools live` with a gateway cassette is an input error (its
/// tools ran in the harness).
pub(crate) async fn replay_all(
    cassettes: &[AnyCassette],
    tools: ReplayTools,
    registry: &EnvironmentRegistry,
) -> Result<ReplaySummary> {
    let mut summary = ReplaySummary {
        tools,
        replayed: 0,
        identical: 0,
        diverged: Vec::new(),
    };
    if tools == ReplayTools::Live {
        if let Some(c) = cassettes
            .iter()
            .find(|c| matches!(c, AnyCassette::Gateway(_)))
        {
            return Err(CliError::preflight(format!(
                "`{}` is a gateway cassette: the harness ran its tools, so there is nothing to re-run live; replay it with --tools recorded",
                c.id()
            )));
        }
    }
    let mut current: Option<(&Value, ReplaySetup)> = None;
    for c in cassettes {
        let c = match c {
            AnyCassette::Loop(c) => c,
            AnyCassette::Gateway(g) => {
                // Loaded per cassette: a gateway takes its codec by value.
                let outcome = uniagent_gateway::cassette::replay(g, gateway_codec(g)?)
                    .await
                    .map_err(|e| CliError::runtime(format!("replaying `{}`: {e}", g.id)))?;
                summary.record(&g.id, outcome.divergence.map(AnyDivergence::Gateway));
                continue;
            }
        };
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
        summary.record(&c.id, outcome.divergence.map(AnyDivergence::Loop));
    }
    Ok(summary)
}

impl ReplaySummary {
    fn record(&mut self, id: &str, divergence: Option<AnyDivergence>) {
        self.replayed += 1;
        match divergence {
            None => self.identical += 1,
            Some(divergence) => self.diverged.push(Diverged {
                id: id.to_owned(),
                message: divergence.to_string(),
                divergence,
            }),
        }
    }
}
