//! [`HttpWeightSync`]: the trained weights reach SGLang or vLLM inference servers as a Hugging
//! Face checkpoint on disk that every server reloads, with generation paused around the reload.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uniagent_core::{duration_secs, Error, Result, RetryConfig};

use super::weight_sync::WeightSync;
use crate::model::Qwen2ForCausalLM;

/// The HTTP API a server speaks.
///
/// - `sglang` (SGLang's native server): `POST /pause_generation` with `{"mode": "retract"}`
///   (running requests go back to the waiting queue and are recomputed after the pause, so they
///   wait instead of being aborted), `POST /update_weights_from_disk` with `model_path` and
///   `weight_version` (answers `{"success", "message", "num_paused_requests"}`, HTTP 400 when
///   the load fails), `POST /continue_generation`, and `GET /get_weight_version` (newer
///   releases also report `weight_version` in `GET /model_info`, tried when the former is
///   missing).
/// - `vllm` (`vllm serve` with `VLLM_SERVER_DEV_MODE=1`, which mounts the RL and RPC routes):
///   `POST /pause?mode=keep` (requests freeze in the queue and continue on resume),
///   `POST /collective_rpc` calling the workers' `reload_weights` with `weights_path` (the
///   checkpoint folder; recent releases),
///   `POST /reset_prefix_cache` (cached prefixes were computed by the old weights),
///   `POST /update_weight_version` with `new_version`, `POST /resume`, and
///   `GET /weight_info` for the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerFlavour {
    /// SGLang's native HTTP API.
    Sglang,
    /// vLLM's OpenAI server in dev mode (RL and RPC routes).
    Vllm,
}

impl ServerFlavour {
    fn backend(self) -> &'static str {
        match self {
            Self::Sglang => "sglang",
            Self::Vllm => "vllm",
        }
    }
}

/// Settings of an [`HttpWeightSync`].
///
/// ```
/// use uniagent_train::pipeline::{HttpSyncConfig, ServerFlavour};
/// let cfg: HttpSyncConfig = serde_json::from_str(
///     r#"{"endpoints": ["http://gpu-0:30000"], "flavour": "sglang", "staging_dir": "/shared/ckpt"}"#,
/// ).unwrap();
/// assert_eq!(cfg.flavour, ServerFlavour::Sglang);
/// assert_eq!(cfg.timeout.as_secs(), 600);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSyncConfig {
    /// Server roots (`http://host:port`); every one gets every update.
    pub endpoints: Vec<String>,
    /// The API they speak.
    pub flavour: ServerFlavour,
    /// Where checkpoints are written, one folder per version (`v00000001`, ...); only the
    /// newest committed one is kept.
    pub staging_dir: PathBuf,
    /// `staging_dir` as the servers see it (a shared file system mounted elsewhere); `None`:
    /// the same path.
    #[serde(default)]
    pub server_staging_dir: Option<PathBuf>,
    /// Written as `eos_token_id` into `config.json` and `generation_config.json` (see
    /// [`super::export_hf`]); `None` keeps the policy's config as it is.
    #[serde(default)]
    pub eos_token_id: Option<u32>,
    /// Tokenizer files copied into every checkpoint (servers that re-read them on reload).
    #[serde(default)]
    pub tokenizer_dir: Option<PathBuf>,
    /// Total time one HTTP call may take (a reload reads the whole checkpoint).
    #[serde(default = "default_timeout", with = "duration_secs")]
    pub timeout: Duration,
    /// Retries of transient failures (connection refused, HTTP 408/429/5xx).
    #[serde(default)]
    pub retry: RetryConfig,
    /// The version the servers hold at start (the first commit is this plus one).
    #[serde(default)]
    pub initial_version: u64,
}

fn default_timeout() -> Duration {
    Duration::from_secs(600)
}

impl HttpSyncConfig {
    /// A config for `endpoints` of `flavour`, staging in `staging_dir`, with defaults.
    pub fn new(endpoints: Vec<String>, flavour: ServerFlavour, staging_dir: PathBuf) -> Self {
        Self {
            endpoints,
            flavour,
            staging_dir,
            server_staging_dir: None,
            eos_token_id: None,
            tokenizer_dir: None,
            timeout: default_timeout(),
            retry: RetryConfig::default(),
            initial_version: 0,
        }
    }
}

/// A checkpoint written by `stage` and not yet committed.
#[derive(Debug, Clone)]
struct Staged {
    version: u64,
    dir: PathBuf,
}

/// [`WeightSync`] to HTTP inference servers (SGLang or vLLM, see [`ServerFlavour`]).
///
/// [`stage`](WeightSync::stage) writes the policy as a Hugging Face checkpoint into a fresh
/// folder `staging_dir/vNNNNNNNN` (through a temporary name, so that a server never sees half
/// a checkpoint). [`commit`](WeightSync::commit) pauses generation on every server, asks each
/// to reload the folder under the new version, resumes every paused server (also when
/// something failed), checks that each reports the new version, and deletes older
/// checkpoints. Requests sent while the servers are paused wait; the version every output
/// reports tells which weights produced it.
///
/// Errors: a reload the server refuses is an [`Error::Model`] carrying the server's message,
/// not retried; connection failures and HTTP 408/429/5xx are retried per
/// [`HttpSyncConfig::retry`]; a server reporting another version afterwards is an
/// [`Error::Protocol`].
///
/// ```no_run
/// # async fn demo(policy: &uniagent_train::model::Qwen2ForCausalLM) -> uniagent_core::Result<()> {
/// use uniagent_train::pipeline::{HttpSyncConfig, HttpWeightSync, ServerFlavour, WeightSync};
/// let sync = HttpWeightSync::new(HttpSyncConfig::new(
///     vec!["http://127.0.0.1:30000".into()],
///     ServerFlavour::Sglang,
///     "/tmp/policy-sync".into(),
/// ))?;
/// sync.stage(policy)?;
/// let version = sync.commit().await?;
/// assert_eq!(version, sync.version());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct HttpWeightSync {
    config: HttpSyncConfig,
    client: reqwest::Client,
    name: String,
    version: AtomicU64,
    staged: Mutex<Option<Staged>>,
}

impl HttpWeightSync {
    /// A sync for `config`; checks it and creates the staging folder.
    pub fn new(config: HttpSyncConfig) -> Result<Self> {
        if config.endpoints.is_empty() {
            return Err(Error::config(
                "http weight sync needs at least one endpoint",
            ));
        }
        if config.timeout.is_zero() {
            return Err(Error::config("http weight sync timeout must be positive"));
        }
        config.retry.validate()?;
        std::fs::create_dir_all(&config.staging_dir).map_err(|e| {
            Error::io(
                format!("creating staging dir {}", config.staging_dir.display()),
                e,
            )
        })?;
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(Duration::from_secs(10).min(config.timeout))
            .build()
            .map_err(|e| Error::internal(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            name: format!("http-{}", config.flavour.backend()),
            version: AtomicU64::new(config.initial_version),
            client,
            staged: Mutex::new(None),
            config,
        })
    }

    /// The folder of version `version` in the staging folder.
    pub fn checkpoint_dir(&self, version: u64) -> PathBuf {
        self.config.staging_dir.join(format!("v{version:08}"))
    }

    /// The version the server at `endpoint` reports (its `weight_version`, an integer).
    pub async fn server_version(&self, endpoint: &str) -> Result<u64> {
        let text = self.read_version(endpoint).await?;
        text.parse().map_err(|_| Error::Protocol {
            message: format!("{endpoint} reports weight version {text:?}, not an integer"),
        })
    }

    fn backend(&self) -> &'static str {
        self.config.flavour.backend()
    }

    /// The path the servers load `dir` from.
    fn server_path(&self, dir: &Path) -> Result<String> {
        let path = match &self.config.server_staging_dir {
            Some(remote) => {
                remote.join(dir.strip_prefix(&self.config.staging_dir).map_err(|_| {
                    Error::internal(format!("{} is outside the staging dir", dir.display()))
                })?)
            }
            None => std::path::absolute(dir)
                .map_err(|e| Error::io(format!("resolving {}", dir.display()), e))?,
        };
        path.to_str().map(str::to_owned).ok_or_else(|| {
            Error::invalid_input(format!("checkpoint path {} is not UTF-8", path.display()))
        })
    }

    /// One HTTP call with retries of transient failures; the JSON answer (`null` when empty).
    async fn call(
        &self,
        endpoint: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value> {
        let url = format!("{}{path}", endpoint.trim_end_matches('/'));
        self.config
            .retry
            .retry(|| self.attempt(&url, method.clone(), body))
            .await
    }

    async fn attempt(
        &self,
        url: &str,
        method: reqwest::Method,
        body: Option<&Value>,
    ) -> Result<Value> {
        let mut request = self.client.request(method, url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.transport(url, e))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| self.transport(url, e))?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status.is_success() {
            return Ok(value);
        }
        let code = status.as_u16();
        Err(Error::Model {
            backend: self.backend().into(),
            message: format!("{url}: HTTP {code}: {}", server_message(&value)),
            // Pausing, reloading the same checkpoint and resuming can run twice without harm.
            retryable: uniagent_core::retryable_http_status(code, true),
            source: None,
        })
    }

    fn transport(&self, url: &str, e: reqwest::Error) -> Error {
        if e.is_timeout() && !e.is_connect() {
            // The server may have acted on it (a reload in progress): not retried blindly.
            return Error::Timeout {
                operation: format!("{} {url}", self.backend()),
                after: self.config.timeout,
            };
        }
        Error::Model {
            backend: self.backend().into(),
            message: format!("{url}: {e}"),
            retryable: e.is_connect() || e.is_request(),
            source: Some(Box::new(e)),
        }
    }

    async fn pause(&self, endpoint: &str) -> Result<()> {
        match self.config.flavour {
            ServerFlavour::Sglang => {
                let body = json!({"mode": "retract"});
                self.call(
                    endpoint,
                    reqwest::Method::POST,
                    "/pause_generation",
                    Some(&body),
                )
                .await?;
            }
            ServerFlavour::Vllm => {
                self.call(endpoint, reqwest::Method::POST, "/pause?mode=keep", None)
                    .await?;
            }
        }
        Ok(())
    }

    async fn resume(&self, endpoint: &str) -> Result<()> {
        match self.config.flavour {
            ServerFlavour::Sglang => {
                let body = json!({});
                self.call(
                    endpoint,
                    reqwest::Method::POST,
                    "/continue_generation",
                    Some(&body),
                )
                .await?;
            }
            ServerFlavour::Vllm => {
                self.call(endpoint, reqwest::Method::POST, "/resume", None)
                    .await?;
            }
        }
        Ok(())
    }

    async fn reload(&self, endpoint: &str, path: &str, version: u64) -> Result<()> {
        let post = reqwest::Method::POST;
        match self.config.flavour {
            ServerFlavour::Sglang => {
                let body = json!({
                    "model_path": path,
                    "weight_version": version.to_string(),
                    "abort_all_requests": false,
                });
                let answer = self
                    .call(endpoint, post, "/update_weights_from_disk", Some(&body))
                    .await
                    .map_err(|e| self.reload_error(endpoint, path, e))?;
                // SGLang answers 400 on failure, but the body is the contract.
                if answer.get("success").and_then(Value::as_bool) != Some(true) {
                    return Err(Error::Model {
                        backend: self.backend().into(),
                        message: format!(
                            "{endpoint} could not reload {path}: {}",
                            server_message(&answer)
                        ),
                        retryable: false,
                        source: None,
                    });
                }
            }
            ServerFlavour::Vllm => {
                let rpc = json!({"method": "reload_weights", "kwargs": {"weights_path": path}});
                self.call(endpoint, post.clone(), "/collective_rpc", Some(&rpc))
                    .await
                    .map_err(|e| self.reload_error(endpoint, path, e))?;
                self.call(endpoint, post.clone(), "/reset_prefix_cache", None)
                    .await?;
                let body = json!({"new_version": version.to_string()});
                self.call(endpoint, post, "/update_weight_version", Some(&body))
                    .await?;
            }
        }
        Ok(())
    }

    /// Names the checkpoint in a failed reload's error, keeping its type.
    fn reload_error(&self, endpoint: &str, path: &str, e: Error) -> Error {
        match e {
            Error::Model {
                backend,
                message,
                retryable,
                source,
            } => Error::Model {
                backend,
                message: format!("{endpoint} could not reload {path}: {message}"),
                retryable,
                source,
            },
            other => other,
        }
    }

    async fn read_version(&self, endpoint: &str) -> Result<String> {
        let get = reqwest::Method::GET;
        let answer = match self.config.flavour {
            ServerFlavour::Sglang => {
                match self
                    .call(endpoint, get.clone(), "/get_weight_version", None)
                    .await
                {
                    Err(Error::Model { message, .. }) if message.contains("HTTP 404") => {
                        self.call(endpoint, get, "/model_info", None).await?
                    }
                    other => other?,
                }
            }
            ServerFlavour::Vllm => self.call(endpoint, get, "/weight_info", None).await?,
        };
        match &answer["weight_version"] {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            other => Err(Error::Protocol {
                message: format!("{endpoint} reports no weight_version (got {other})"),
            }),
        }
    }

    /// Pauses every server, reloads `path` as `version` on each, and resumes every server it
    /// paused whatever happened.
    async fn reload_all(&self, path: &str, version: u64) -> Result<()> {
        let mut paused = Vec::new();
        let mut result = Ok(());
        for endpoint in &self.config.endpoints {
            match self.pause(endpoint).await {
                Ok(()) => paused.push(endpoint),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            for endpoint in &self.config.endpoints {
                if let Err(e) = self.reload(endpoint, path, version).await {
                    result = Err(e);
                    break;
                }
            }
        }
        let mut resumed = Ok(());
        for endpoint in paused {
            if let Err(e) = self.resume(endpoint).await {
                tracing::error!(endpoint = %endpoint, error = %e, "could not resume generation");
                if resumed.is_ok() {
                    resumed = Err(e);
                }
            }
        }
        // The reload's failure is the cause; a failed resume after it is logged above.
        result.and(resumed)
    }

    /// Deletes the checkpoints of this sync other than `keep`.
    fn prune(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.config.staging_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let ours = name
                .strip_prefix('v')
                .or_else(|| name.strip_prefix(".tmp-v"))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if ours && path != keep {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "could not delete an old checkpoint");
                }
            }
        }
    }
}

/// The human-readable part of a server's error answer.
fn server_message(value: &Value) -> String {
    for key in ["message", "error", "detail"] {
        match &value[key] {
            Value::String(s) => return s.clone(),
            Value::Object(o) => {
                if let Some(Value::String(s)) = o.get("message") {
                    return s.clone();
                }
            }
            _ => {}
        }
    }
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[async_trait]
impl WeightSync for HttpWeightSync {
    fn name(&self) -> &str {
        &self.name
    }

    fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    fn stage(&self, policy: &Qwen2ForCausalLM) -> Result<()> {
        let version = self.version() + 1;
        let dir = self.checkpoint_dir(version);
        let tmp = self.config.staging_dir.join(format!(".tmp-v{version:08}"));
        for old in [&tmp, &dir] {
            if old.exists() {
                std::fs::remove_dir_all(old)
                    .map_err(|e| Error::io(format!("removing {}", old.display()), e))?;
            }
        }
        super::run::blocking(|| match self.config.eos_token_id {
            Some(eos) => super::export_hf(policy, eos, self.config.tokenizer_dir.as_deref(), &tmp),
            None => policy.save_pretrained(&tmp),
        })?;
        std::fs::rename(&tmp, &dir).map_err(|e| {
            Error::io(
                format!("renaming {} to {}", tmp.display(), dir.display()),
                e,
            )
        })?;
        *self
            .staged
            .lock()
            .map_err(|_| Error::internal("staged checkpoint lock poisoned"))? =
            Some(Staged { version, dir });
        Ok(())
    }

    async fn commit(&self) -> Result<u64> {
        let staged = self
            .staged
            .lock()
            .map_err(|_| Error::internal("staged checkpoint lock poisoned"))?
            .clone()
            .ok_or_else(|| Error::invalid_input("commit without a staged checkpoint"))?;
        let path = self.server_path(&staged.dir)?;
        self.reload_all(&path, staged.version).await?;
        let expected = staged.version.to_string();
        for endpoint in &self.config.endpoints {
            let reported = self.read_version(endpoint).await?;
            if reported != expected {
                return Err(Error::Protocol {
                    message: format!(
                        "{endpoint} reports weight version {reported:?} after reloading \
                         {path} as {expected}"
                    ),
                });
            }
        }
        self.version.store(staged.version, Ordering::SeqCst);
        if let Ok(mut slot) = self.staged.lock() {
            *slot = None;
        }
        self.prune(&staged.dir);
        tracing::info!(version = staged.version, path = %path, "weights reloaded by the servers");
        Ok(staged.version)
    }
}
