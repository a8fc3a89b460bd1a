//! The `model:` section: which backend samples the agent's turns.
//!
//! - `openai`: any OpenAI-compatible chat-completions server (message level, for evaluation);
//! - `vllm` / `sglang`: token-level generators over a server, rendered and parsed with the
//!   chat template of `tokenizer` (a Hugging Face directory), so trajectories carry tokens;
//! - `tch`: a local policy directory, served in-process by the training crate's engine
//!   (feature `tch`); `train` starts from it, or from a policy made from scratch without `dir`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::cassette::Recorder;
use uniagent_core::codec::Codec;
use uniagent_core::layer::{Layer, With};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::{ChatModel, GenerateOutput, GenerateRequest, LengthLimits, TokenGenerator};
use uniagent_models::{
    HttpModelConfig, OpenAiChatModel, OpenAiConfig, SglangGenerator, VllmGenerator,
};

use crate::config::resolve;
use crate::error::{CliError, Result};

/// A built model and, for token-level backends, its weight-version log.
pub type BuiltModel = (Arc<dyn ChatModel>, Option<Arc<VersionLog>>);

/// Which model backend, and its settings (`type` picks it).
///
/// ```
/// use uniagent_cli::model::ModelConfig;
/// let m: ModelConfig = serde_norway::from_str(
///     "type: openai\nhttp:\n  endpoints: [http://127.0.0.1:8000/v1]\n  model: qwen\n",
/// ).unwrap();
/// assert_eq!(m.backend(), "openai");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ModelConfig {
    /// OpenAI-compatible chat completions.
    Openai(OpenAiConfig),
    /// A vLLM server's `/v1/completions`, token in, token out.
    Vllm(TokenServerConfig),
    /// An SGLang server's `/generate`, token in, token out.
    Sglang(TokenServerConfig),
    /// A policy directory served in-process by the training crate's engine.
    Tch(TchConfig),
    /// verl's LLM servers, through the generation bridge of the `uniagent-verl` Python
    /// package: each rollout request of `uniagent serve` names its bridge. `run` and `train`
    /// refuse it (there is no verl to generate with).
    Verl(VerlModelConfig),
}

/// Settings of the `verl` backend: the policy's chat template and tokenizer, the length limits
/// and how long one generation through the bridge may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerlModelConfig {
    /// Hugging Face directory with `tokenizer.json` and the chat template (verl's model path).
    pub tokenizer: PathBuf,
    /// Length limits of every rollout (prompt, response, context window).
    #[serde(default)]
    pub limits: LengthLimits,
    /// The longest one generation through the bridge may take (verl may hold a request across
    /// a weight sync).
    #[serde(
        default = "default_bridge_timeout",
        with = "uniagent_core::duration_secs"
    )]
    pub bridge_timeout: Duration,
}

fn default_bridge_timeout() -> Duration {
    Duration::from_secs(1800)
}

/// Settings of a token-level server backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenServerConfig {
    /// Endpoints, served model name, timeout, retries.
    pub http: HttpModelConfig,
    /// Hugging Face directory with `tokenizer.json` and the chat template.
    pub tokenizer: PathBuf,
    /// Length limits of every rollout (prompt, response, context window).
    #[serde(default)]
    pub limits: LengthLimits,
}

/// Settings of the in-process `tch` backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TchConfig {
    /// The policy: a Hugging Face directory (`config.json`, safetensors, tokenizer). `train`
    /// may leave it out to start from the trainer's freshly initialised model.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Length limits of every rollout (prompt, response, context window).
    #[serde(default)]
    pub limits: LengthLimits,
    /// Seed of the per-request sampling seeds (a run is reproducible at any temperature).
    #[serde(default)]
    pub seed: u64,
}

impl ModelConfig {
    /// The backend name as written in `type`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Openai(_) => "openai",
            Self::Vllm(_) => "vllm",
            Self::Sglang(_) => "sglang",
            Self::Tch(_) => "tch",
            Self::Verl(_) => "verl",
        }
    }

    /// Resolves relative directories against `base`.
    pub fn resolve_paths(&mut self, base: &Path) {
        match self {
            Self::Vllm(c) | Self::Sglang(c) => c.tokenizer = resolve(base, &c.tokenizer),
            Self::Tch(c) => c.dir = c.dir.as_ref().map(|d| resolve(base, d)),
            Self::Verl(c) => c.tokenizer = resolve(base, &c.tokenizer),
            Self::Openai(_) => {}
        }
    }

    /// The HTTP endpoints the backend calls (for the reachability check).
    pub fn endpoints(&self) -> &[String] {
        match self {
            Self::Openai(c) => &c.http.endpoints,
            Self::Vllm(c) | Self::Sglang(c) => &c.http.endpoints,
            Self::Tch(_) | Self::Verl(_) => &[],
        }
    }

    /// Builds the chat model. Errors are bad input (exit 2): nothing has started yet.
    pub fn build(&self) -> Result<Arc<dyn ChatModel>> {
        Ok(self.build_with_versions()?.0)
    }

    /// Builds the chat model and, for token-level backends, the log of the weight version of
    /// every sampled token per rollout.
    pub fn build_with_versions(&self) -> Result<BuiltModel> {
        self.build_recording(None)
    }

    /// Like [`build_with_versions`](Self::build_with_versions); with `recorder`, every
    /// generation (request and output, as the backend saw them) is recorded into it for
    /// cassettes. An API-level model cannot be recorded token for token: that is a config
    /// error.
    pub fn build_recording(&self, recorder: Option<&Arc<Recorder>>) -> Result<BuiltModel> {
        let bad = |e: uniagent_core::Error| CliError::config("model", self.backend(), e);
        match self {
            Self::Openai(_) if recorder.is_some() => Err(CliError::config(
                "model",
                "type",
                "cassettes record token ids: use a token-level model (vllm, sglang or tch), not `openai`",
            )),
            Self::Openai(c) => Ok((Arc::new(OpenAiChatModel::new(c).map_err(bad)?), None)),
            Self::Vllm(c) | Self::Sglang(c) => {
                let server: Arc<dyn TokenGenerator> = match self {
                    Self::Vllm(_) => Arc::new(VllmGenerator::new(&c.http).map_err(bad)?),
                    _ => Arc::new(SglangGenerator::new(&c.http).map_err(bad)?),
                };
                let codec = self.codec()?;
                let log = Arc::new(VersionLog::default());
                let generator = server
                    .with(&recorder)
                    .with(&LogVersions(Arc::clone(&log)));
                let model =
                    uniagent_core::agent::TokenChatModel::new(generator, Arc::new(codec), c.limits);
                Ok((Arc::new(model), Some(log)))
            }
            Self::Tch(c) => build_tch(c, recorder),
            Self::Verl(_) => Err(CliError::config(
                "model",
                "type",
                "model type `verl` generates through verl's LLM servers, which only `uniagent serve` reaches (verl's agent loop sends each rollout with its generation bridge); use vllm, sglang, tch or openai here",
            )),
        }
    }

    /// The codec of a token-level backend (its tokenizer directory's chat template and
    /// tokenizer) and its length limits, without building the generator: what a replay needs.
    pub fn codec_and_limits(&self) -> Result<(Codec, LengthLimits)> {
        match self {
            Self::Vllm(c) | Self::Sglang(c) => Ok((self.codec()?, c.limits)),
            Self::Tch(c) => Ok((self.codec()?, c.limits)),
            Self::Verl(c) => Ok((self.codec()?, c.limits)),
            Self::Openai(_) => Err(CliError::config(
                "model",
                "openai",
                "an API-level model has no codec: cassettes need a token-level model",
            )),
        }
    }

    /// The codec, parsing Hermes tool calls (`<tool_call>{json}</tool_call>`, the Qwen
    /// family's format) for every token-level backend, as the training crate's engine does.
    fn codec(&self) -> Result<Codec> {
        match self {
            Self::Vllm(TokenServerConfig { tokenizer, .. })
            | Self::Sglang(TokenServerConfig { tokenizer, .. })
            | Self::Verl(VerlModelConfig { tokenizer, .. }) => Codec::from_dir(tokenizer)
                .map(|c| c.with_tool_parser(ToolCallFormat::Hermes))
                .map_err(|e| {
                    CliError::preflight(format!("model.tokenizer {}: {e}", tokenizer.display()))
                }),
            // As the training crate's `load_hf` builds it for the engine.
            Self::Tch(TchConfig { dir: Some(dir), .. }) => Codec::from_dir(dir)
                .map(|c| c.with_tool_parser(ToolCallFormat::Hermes))
                .map_err(|e| CliError::preflight(format!("model.dir {}: {e}", dir.display()))),
            Self::Tch(TchConfig { dir: None, .. }) => Err(CliError::preflight(
                "model.dir: a `tch` model without a policy directory has no codec",
            )),
            Self::Openai(_) => Err(CliError::preflight("model type `openai` has no codec")),
        }
    }

    /// Checks that every endpoint accepts TCP connections (within 5 s each), so that an
    /// unreachable server fails before any sandbox starts.
    pub async fn check_reachable(&self) -> Result<()> {
        for url in self.endpoints() {
            let Some(addr) = host_port(url) else {
                return Err(CliError::preflight(format!(
                    "model endpoint `{url}` is not an http:// or https:// URL"
                )));
            };
            let connect = tokio::net::TcpStream::connect(addr.clone());
            match tokio::time::timeout(Duration::from_secs(5), connect).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(CliError::preflight(format!(
                        "model endpoint {url} is unreachable ({e}); start the server or fix model.http.endpoints"
                    )))
                }
                Err(_) => {
                    return Err(CliError::preflight(format!(
                        "model endpoint {url} did not accept a connection within 5 s; start the server or fix model.http.endpoints"
                    )))
                }
            }
        }
        Ok(())
    }
}

/// The `tch` backend: the policy directory served in-process by the training crate's engine
/// (GPU when libtorch sees one), each request seeded from `seed`, the rollout and its length.
#[cfg(feature = "tch")]
fn build_tch(c: &TchConfig, recorder: Option<&Arc<Recorder>>) -> Result<BuiltModel> {
    use uniagent_train::generate::{EngineConfig, TchEngine};
    use uniagent_train::pipeline::Seeding;

    let Some(dir) = &c.dir else {
        return Err(CliError::preflight(
            "model.dir: `run` with model type `tch` needs the policy directory (a Hugging Face directory, e.g. the policy/ a train run exported)",
        ));
    };
    let device = uniagent_train::tch::Device::cuda_if_available();
    let (codec, policy) = uniagent_train::scratch::load_hf(dir, device)
        .map_err(|e| CliError::preflight(format!("model.dir {}: {e}", dir.display())))?;
    let engine = TchEngine::new(policy, EngineConfig::default());
    let log = Arc::new(VersionLog::default());
    let engine: Arc<dyn TokenGenerator> = Arc::new(engine);
    // Recorded inside the seeding, so that cassettes hold each request's seed.
    let generator = engine
        .with(&recorder)
        .with(&Seeding(c.seed))
        .with(&LogVersions(Arc::clone(&log)));
    let model = uniagent_core::agent::TokenChatModel::new(generator, Arc::new(codec), c.limits);
    Ok((Arc::new(model), Some(log)))
}

#[cfg(not(feature = "tch"))]
fn build_tch(c: &TchConfig, _recorder: Option<&Arc<Recorder>>) -> Result<BuiltModel> {
    Err(CliError::preflight(format!(
        "model type `tch` (dir {}) needs libtorch, which this build of uniagent does not include: rebuild with `--features tch`",
        c.dir.as_ref().map_or_else(|| "unset".into(), |d| d.display().to_string())
    )))
}

/// The weight version of every token sampled per rollout (`None` where the engine did not
/// say), recorded as the generator answers.
#[derive(Debug, Default)]
pub struct VersionLog {
    by_rollout: Mutex<HashMap<String, Vec<Option<u64>>>>,
}

impl VersionLog {
    /// Records `n` tokens of `version` for rollout `id`.
    pub fn record(&self, id: &str, n: usize, version: Option<u64>) {
        if let Ok(mut map) = self.by_rollout.lock() {
            map.entry(id.to_owned())
                .or_default()
                .extend(std::iter::repeat_n(version, n));
        }
    }

    /// The versions recorded for rollout `id`, in order (and forgets them).
    pub fn take(&self, id: &str) -> Vec<Option<u64>> {
        self.by_rollout
            .lock()
            .ok()
            .and_then(|mut m| m.remove(id))
            .unwrap_or_default()
    }
}

/// A generator that logs the weight version of what it samples (put on by [`LogVersions`]).
#[derive(Debug)]
struct Versioned {
    inner: Arc<dyn TokenGenerator>,
    log: Arc<VersionLog>,
}

/// The [`Layer`] that logs the weight version of every sampled token into its log.
#[derive(Debug, Clone)]
pub(crate) struct LogVersions(pub(crate) Arc<VersionLog>);

impl Layer<Arc<dyn TokenGenerator>> for LogVersions {
    fn wrap(&self, inner: Arc<dyn TokenGenerator>) -> Arc<dyn TokenGenerator> {
        Arc::new(Versioned {
            inner,
            log: Arc::clone(&self.0),
        })
    }
}

#[async_trait::async_trait]
impl TokenGenerator for Versioned {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn generate(&self, request: GenerateRequest) -> uniagent_core::Result<GenerateOutput> {
        let id = request.session_id.clone().unwrap_or_default();
        let out = self.inner.generate(request).await?;
        self.log
            .record(&id, out.token_ids.len(), out.weight_version);
        Ok(out)
    }
}

/// `host:port` of an http(s) URL (default ports 80 / 443).
fn host_port(url: &str) -> Option<String> {
    let (rest, default_port) = if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if authority.is_empty() {
        return None;
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok() && !authority.ends_with(']'));
    Some(if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_of_urls() {
        assert_eq!(
            host_port("http://127.0.0.1:8000/v1").as_deref(),
            Some("127.0.0.1:8000")
        );
        assert_eq!(
            host_port("https://api.openai.com/v1").as_deref(),
            Some("api.openai.com:443")
        );
        assert_eq!(host_port("http://u:p@h:9/x").as_deref(), Some("h:9"));
        assert_eq!(host_port("ftp://x"), None);
        assert_eq!(host_port("http://"), None);
    }

    #[tokio::test]
    async fn a_closed_port_is_a_preflight_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let cfg: ModelConfig = serde_json::from_value(serde_json::json!({
            "type": "openai",
            "http": {"endpoints": [format!("http://127.0.0.1:{port}/v1")], "model": "m"}
        }))
        .unwrap();
        let err = cfg.check_reachable().await.unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("unreachable"), "{err}");
    }
}
