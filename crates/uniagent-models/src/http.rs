//! The HTTP plumbing shared by the model backends: endpoint choice, timeouts, retries with
//! backoff on retryable errors only, error mapping.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_core::{duration_secs, retryable_http_status, Error, Result, RetryConfig};

use super::pool::EndpointPool;

/// Connection settings of an HTTP model backend.
///
/// ```
/// use uniagent_models::HttpModelConfig;
/// let cfg: HttpModelConfig = serde_json::from_str(
///     r#"{"endpoints": ["http://gpu-0:8000", "http://gpu-1:8000"], "model": "Qwen/Qwen3-8B", "timeout": 300}"#,
/// ).unwrap();
/// assert_eq!(cfg.retry.max_attempts, 5);
/// assert!(serde_json::from_str::<HttpModelConfig>(r#"{"endpoint": "x", "model": "m"}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpModelConfig {
    /// Base URLs of equivalent servers. vLLM and SGLang: the server root
    /// (`http://host:8000`); OpenAI-compatible chat: the API root including `/v1`.
    pub endpoints: Vec<String>,
    /// Model name sent with every request.
    pub model: String,
    /// Total time one HTTP request may take.
    #[serde(default = "default_timeout", with = "duration_secs")]
    pub timeout: Duration,
    /// Retries of retryable failures (connection errors, HTTP 408/429/5xx).
    #[serde(default)]
    pub retry: RetryConfig,
    /// Environment variable holding the API key (sent as a bearer token); unset or absent
    /// variable: no `Authorization` header.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// How long to wait for a TCP connection (a blackholed endpoint otherwise eats the whole
    /// `timeout`); a connect failure is retried on another endpoint.
    #[serde(default = "default_connect_timeout", with = "duration_secs")]
    pub connect_timeout: Duration,
    /// Largest response body accepted, in bytes.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_max_response_bytes() -> usize {
    64 << 20
}

/// How long an endpoint that failed is avoided.
const FAILURE_COOLDOWN: Duration = Duration::from_secs(5);

/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

fn default_timeout() -> Duration {
    Duration::from_secs(600)
}

impl HttpModelConfig {
    /// A config for `endpoints` and `model` with default timeout and retries.
    pub fn new(endpoints: Vec<String>, model: impl Into<String>) -> Self {
        Self {
            endpoints,
            model: model.into(),
            timeout: default_timeout(),
            retry: RetryConfig::default(),
            api_key_env: None,
            connect_timeout: default_connect_timeout(),
            max_response_bytes: default_max_response_bytes(),
        }
    }
}

/// A JSON-over-HTTP client bound to a pool of endpoints.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    pub(crate) pool: EndpointPool,
    retry: RetryConfig,
    timeout: Duration,
    api_key: Option<String>,
    backend: &'static str,
    max_response_bytes: usize,
}

/// The API key is redacted.
impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("backend", &self.backend)
            .field("pool", &self.pool)
            .field("timeout", &self.timeout)
            .field(
                "api_key",
                &uniagent_core::config::redacted(self.api_key.as_deref()),
            )
            .finish_non_exhaustive()
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not used by model servers), capped.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let secs: f64 = text.trim().parse().ok()?;
    Some(Duration::try_from_secs_f64(secs).ok()?.min(MAX_RETRY_AFTER))
}

impl HttpClient {
    pub(crate) fn new(config: &HttpModelConfig, backend: &'static str) -> Result<Self> {
        if config.timeout.is_zero() {
            return Err(Error::Config {
                message: format!("{backend}.timeout must be > 0"),
                source: None,
            });
        }
        config.retry.validate()?;
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout.min(config.timeout))
            .build()
            .map_err(|e| Error::Config {
                message: format!("{backend}: building the HTTP client failed: {e}"),
                source: Some(Box::new(e)),
            })?;
        let api_key = config
            .api_key_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|k| !k.is_empty());
        Ok(Self {
            client,
            pool: EndpointPool::new(config.endpoints.clone())?,
            retry: config.retry.clone(),
            timeout: config.timeout,
            api_key,
            backend,
            max_response_bytes: config.max_response_bytes,
        })
    }

    fn model_error(&self, message: String, retryable: bool) -> Error {
        Error::Model {
            backend: self.backend.to_owned(),
            message,
            retryable,
            source: None,
        }
    }

    async fn attempt(&self, path: &str, body: &Value, session: Option<&str>) -> Result<Value> {
        // Every endpoint asked to be left alone (Retry-After) or failed just now: wait for the
        // first to recover rather than hammer it.
        let wait = self.pool.wait_for_any();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let lease = self.pool.acquire(session);
        let index = lease.index();
        let url = format!("{}{path}", lease.base_url());
        let mut request = self.client.post(&url).timeout(self.timeout).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let result = async {
            let response = request.send().await.map_err(|e| {
                self.pool.cool_down(index, FAILURE_COOLDOWN);
                self.transport_error(&url, e)
            })?;
            let status = response.status();
            let pause = retry_after(response.headers());
            let bytes = self.read_capped(&url, response).await.inspect_err(|e| {
                if !matches!(e, Error::Protocol { .. }) {
                    self.pool.cool_down(index, FAILURE_COOLDOWN);
                }
            })?;
            if !status.is_success() {
                let code = status.as_u16();
                // A generation can run twice without harm.
                let retryable = retryable_http_status(code, true);
                match (retryable, pause) {
                    (true, Some(pause)) => self.pool.hold_off(index, pause),
                    (true, None) => self.pool.cool_down(index, FAILURE_COOLDOWN),
                    (false, _) => {}
                }
                let text = String::from_utf8_lossy(&bytes);
                let snippet: String = text.chars().take(500).collect();
                return Err(
                    self.model_error(format!("HTTP {status} from {url}: {snippet}"), retryable)
                );
            }
            serde_json::from_slice(&bytes).map_err(|e| Error::Protocol {
                message: format!("{}: {url} answered with invalid JSON: {e}", self.backend),
            })
        }
        .await;
        if let (Err(e), Some(s)) = (&result, session) {
            // A retry (or the session's next request) may move to a healthy server; a timed-out
            // endpoint no longer keeps the session pinned.
            if e.is_retryable() || matches!(e, Error::Timeout { .. }) {
                self.pool.forget(s);
            }
        }
        result
    }

    /// The response body, refusing more than `max_response_bytes` (by `Content-Length` before
    /// reading, and by counting while reading).
    async fn read_capped(&self, url: &str, mut response: reqwest::Response) -> Result<Vec<u8>> {
        let cap = self.max_response_bytes;
        let too_big = || Error::Protocol {
            message: format!(
                "{}: {url} answered with more than {cap} bytes (max_response_bytes)",
                self.backend
            ),
        };
        if response.content_length().is_some_and(|n| n > cap as u64) {
            return Err(too_big());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(url, e))?
        {
            if body.len() + chunk.len() > cap {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn transport_error(&self, url: &str, e: reqwest::Error) -> Error {
        if e.is_timeout() && !e.is_connect() {
            // Not retried: the server may still be generating; repeating doubles its load.
            return Error::Timeout {
                operation: format!("{} request to {url}", self.backend),
                after: self.timeout,
            };
        }
        // Refused, reset, or no connection within connect_timeout: nothing was generated,
        // another endpoint (or a later attempt) may do.
        Error::Model {
            backend: self.backend.to_owned(),
            message: format!("request to {url} failed: {e}"),
            retryable: true,
            source: Some(Box::new(e)),
        }
    }

    /// POSTs `body` to `path` on an endpoint chosen for `session`, retrying retryable failures.
    /// One token-level generation round trip, with the checks every token backend needs: an
    /// empty prompt is an input error, a zero token budget answers without a request, and a
    /// server that returns more tokens than allowed breaks the protocol.
    #[cfg(any(feature = "vllm", feature = "sglang"))]
    pub(crate) async fn generate_tokens(
        &self,
        backend: &str,
        path: &str,
        request: &uniagent_core::GenerateRequest,
        body: impl FnOnce() -> Value,
        parse: fn(&Value) -> Result<uniagent_core::GenerateOutput>,
    ) -> Result<uniagent_core::GenerateOutput> {
        if request.prompt_ids.is_empty() {
            return Err(Error::invalid_input(format!("{backend}: empty prompt")));
        }
        if request.max_new_tokens == 0 {
            return Ok(uniagent_core::GenerateOutput {
                token_ids: Vec::new(),
                logprobs: Some(Vec::new()),
                finish_reason: uniagent_core::FinishReason::Length,
                weight_version: None,
            });
        }
        let response = self
            .post_json(path, &body(), request.session_id.as_deref())
            .await?;
        let out = parse(&response)?;
        if out.token_ids.len() > request.max_new_tokens {
            return Err(Error::Protocol {
                message: format!(
                    "{backend}: {} tokens returned, {} allowed",
                    out.token_ids.len(),
                    request.max_new_tokens
                ),
            });
        }
        Ok(out)
    }

    pub(crate) async fn post_json(
        &self,
        path: &str,
        body: &Value,
        session: Option<&str>,
    ) -> Result<Value> {
        self.retry.retry(|| self.attempt(path, body, session)).await
    }
}

/// Whether a server's own list of sampled ids (`ids`) is exactly `token_ids`.
#[cfg(any(feature = "vllm", feature = "sglang"))]
pub(super) fn ids_agree(ids: &[Value], token_ids: &[u32]) -> bool {
    ids.len() == token_ids.len()
        && ids
            .iter()
            .zip(token_ids)
            .all(|(a, b)| a.as_u64() == Some(u64::from(*b)))
}

/// Implements [`TokenGenerator`](uniagent_core::TokenGenerator) for a generator with an
/// `http: HttpClient` field and an inherent `request_body(&GenerateRequest) -> Value`: each
/// request goes to `$path` through [`HttpClient::generate_tokens`] and its answer is read by
/// `$parse`.
#[cfg(any(feature = "vllm", feature = "sglang"))]
macro_rules! impl_token_generator {
    ($generator:ty, $backend:literal, $path:literal, $parse:path) => {
        #[async_trait::async_trait]
        impl uniagent_core::TokenGenerator for $generator {
            fn name(&self) -> &str {
                $backend
            }

            async fn generate(
                &self,
                request: uniagent_core::GenerateRequest,
            ) -> uniagent_core::Result<uniagent_core::GenerateOutput> {
                let body = || self.request_body(&request);
                self.http
                    .generate_tokens($backend, $path, &request, body, $parse)
                    .await
            }
        }
    };
}
#[cfg(any(feature = "vllm", feature = "sglang"))]
pub(super) use impl_token_generator;
