//! `uniagent gateway [--config FILE] [--model-dir DIR] [--host H] [--port P] [--out DIR]
//! [--cassettes]`:
//! session-scoped OpenAI / Anthropic endpoints over a token-level policy (see
//! `uniagent-gateway`). The policy is `--model-dir` (tch engine, feature `tch`) or the
//! config's `model:` section (`type: vllm | sglang`, as in `run` configs).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::{json, Value};
use uniagent_core::codec::Codec;
use uniagent_core::TokenGenerator;
use uniagent_gateway::cassette::CASSETTES;
use uniagent_gateway::{model_context_len, Gateway, GatewayConfig, Recorder};
use uniagent_models::{SglangGenerator, VllmGenerator};

use crate::error::{CliError, Result};
use crate::model::ModelConfig;

/// Arguments of `gateway`.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Gateway settings (YAML): `model_name`, `max_model_len` (default: the model's
    /// `config.json` `max_position_embeddings`), `default_max_tokens`, `tool_parser`,
    /// `template_kwargs`, and optionally `model:` (a vllm or sglang server).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A Hugging Face model directory served on CPU by the tch engine.
    #[arg(long)]
    pub model_dir: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port; 0 picks a free one (the first stdout line says which).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Where ended sessions' trajectories are appended (`trajectories.jsonl`). Open
    /// sessions are journaled there (`open-sessions.jsonl`, one line per turn): after a
    /// SIGKILL or an OOM kill, the next gateway on the same directory writes their
    /// trajectories, marked recovered, before it serves.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also record each ended session as a cassette in `--out DIR/cassettes.jsonl`, for
    /// `uniagent replay` (every request body is kept: long sessions make large files).
    #[arg(long, requires = "out")]
    pub cassettes: bool,
    /// Serve Prometheus metrics on `GET /metrics` at HOST:PORT (port 0 picks a free one; the
    /// address is printed on stderr as `metrics on http://HOST:PORT/metrics`).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}

/// Runs `gateway` until Ctrl-C / SIGTERM; open sessions are then ended and recorded.
pub(super) fn main(args: GatewayArgs) -> Result<()> {
    let (mut config, model) = read_config(args.config.as_deref())?;
    let (codec, generator) = policy(args.model_dir.as_deref(), model.as_ref())?;
    if config.max_model_len.is_none() {
        // The model's own window: prompts past it are refused (400) before they reach the
        // policy, and request bodies are sized to it.
        config.max_model_len =
            model_files(args.model_dir.as_deref(), model.as_ref()).and_then(model_context_len);
    }
    let mut gateway = Gateway::new(codec, generator, config);
    if let Some(out) = &args.out {
        let recorder = Recorder::create(out).map_err(|e| CliError::preflight(e.to_string()))?;
        gateway = gateway.with_recorder(recorder);
        if args.cassettes {
            let codec_dir = codec_dir(args.model_dir.as_deref(), model.as_ref())?;
            let recorder =
                Recorder::open(out, CASSETTES).map_err(|e| CliError::preflight(e.to_string()))?;
            gateway = gateway.with_cassettes(recorder, json!({"codec_dir": codec_dir}));
        }
        // Sessions a killed gateway left open here are written first; then every turn is
        // journaled, so a SIGKILL or an OOM kill loses at most the turn in flight.
        let (journaled, recovery) = gateway
            .with_journal(out)
            .map_err(|e| CliError::preflight(e.to_string()))?;
        gateway = journaled;
        if !recovery.sessions.is_empty() {
            eprintln!(
                "recovered {} session(s) left open by an unclean exit: {} trajectories appended to {}",
                recovery.sessions.len(),
                recovery.trajectories.len(),
                out.join(uniagent_gateway::TRAJECTORIES).display()
            );
        }
    }
    let gateway = Arc::new(gateway);
    super::runtime()?.block_on(async move {
        let listener = super::listen(&args.host, args.port).await?;
        let exporter = super::metrics::start(args.metrics_addr.as_deref()).await?;
        let served = uniagent_gateway::serve(listener, gateway, super::shutdown_signal())
            .await
            .map_err(|e| CliError::runtime(e.to_string()));
        super::metrics::finish(exporter, std::time::Duration::ZERO).await;
        served
    })
}

/// The model's files: `--model-dir`, or the `tokenizer` folder of a vllm or sglang `model:`
/// section (the codec's files, often with the model's `config.json`).
fn model_files<'a>(
    model_dir: Option<&'a Path>,
    model: Option<&'a ModelConfig>,
) -> Option<&'a Path> {
    match (model_dir, model) {
        (Some(dir), _) => Some(dir),
        (None, Some(ModelConfig::Vllm(c))) => Some(c.tokenizer.as_path()),
        (None, Some(ModelConfig::Sglang(c))) => Some(c.tokenizer.as_path()),
        _ => None,
    }
}

/// The directory the codec was loaded from, absolute (a replay reloads it from there).
fn codec_dir(model_dir: Option<&Path>, model: Option<&ModelConfig>) -> Result<PathBuf> {
    let dir =
        model_files(model_dir, model).ok_or_else(|| CliError::preflight("no codec directory"))?;
    std::fs::canonicalize(dir)
        .map_err(|e| CliError::preflight(format!("cannot resolve {}: {e}", dir.display())))
}

/// The gateway settings and the optional `model:` section.
fn read_config(path: Option<&Path>) -> Result<(GatewayConfig, Option<ModelConfig>)> {
    let Some(path) = path else {
        return Ok((GatewayConfig::default(), None));
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::preflight(format!("cannot read {}: {e}", path.display())))?;
    let bad = |m: String| CliError::preflight(format!("{}: {m}", path.display()));
    uniagent_core::config::check_nesting(&text).map_err(|e| bad(e.to_string()))?;
    let mut value: Value = serde_norway::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let model = match value.as_object_mut().and_then(|o| o.remove("model")) {
        Some(m) => Some(serde_json::from_value(m).map_err(|e| bad(format!("model: {e}")))?),
        None => None,
    };
    let rest = serde_norway::to_string(&value).map_err(|e| bad(e.to_string()))?;
    let config = GatewayConfig::from_yaml(&rest).map_err(|e| bad(e.to_string()))?;
    Ok((config, model))
}

fn policy(
    model_dir: Option<&Path>,
    model: Option<&ModelConfig>,
) -> Result<(Codec, Arc<dyn TokenGenerator>)> {
    match (model_dir, model) {
        (Some(_), Some(_)) => Err(CliError::preflight(
            "give either --model-dir or a `model:` section in --config, not both",
        )),
        (Some(dir), None) => model_dir_policy(dir),
        (None, Some(m)) => server_policy(m),
        (None, None) => Err(CliError::preflight(
            "no policy: pass --model-dir DIR or a `model:` section (vllm or sglang) in --config",
        )),
    }
}

/// A vLLM or SGLang server with the chat template of its `tokenizer` directory.
fn server_policy(model: &ModelConfig) -> Result<(Codec, Arc<dyn TokenGenerator>)> {
    let bad = |e: uniagent_core::Error| CliError::config("model", model.backend(), e);
    let (generator, tokenizer): (Arc<dyn TokenGenerator>, &Path) = match model {
        ModelConfig::Vllm(c) => (Arc::new(VllmGenerator::new(&c.http).map_err(bad)?), &c.tokenizer),
        ModelConfig::Sglang(c) => (Arc::new(SglangGenerator::new(&c.http).map_err(bad)?), &c.tokenizer),
        other => {
            return Err(CliError::preflight(format!(
                "the gateway serves token-level policies: model type `{}` is not one (use vllm, sglang or --model-dir)",
                other.backend()
            )))
        }
    };
    let codec = Codec::from_dir(tokenizer).map_err(|e| {
        CliError::preflight(format!("model.tokenizer {}: {e}", tokenizer.display()))
    })?;
    Ok((codec, generator))
}

#[cfg(feature = "tch")]
fn model_dir_policy(dir: &Path) -> Result<(Codec, Arc<dyn TokenGenerator>)> {
    uniagent_gateway::load_model_dir(dir).map_err(|e| CliError::preflight(e.to_string()))
}

#[cfg(not(feature = "tch"))]
fn model_dir_policy(dir: &Path) -> Result<(Codec, Arc<dyn TokenGenerator>)> {
    Err(CliError::preflight(format!(
        "--model-dir {} needs the tch engine: build uniagent with `--features tch`",
        dir.display()
    )))
}
