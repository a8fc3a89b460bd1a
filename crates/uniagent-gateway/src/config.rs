//! [`GatewayConfig`]: the `--config FILE` of `uniagent gateway` (YAML or JSON).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::LengthLimits;

use crate::error::{GatewayError, Result};

/// The default [`GatewayConfig::max_tokens_cap`].
pub const DEFAULT_MAX_TOKENS_CAP: usize = 16_384;

/// Request bodies up to this size are read whatever the context window (a session's first
/// request may carry long tool schemas and system prompts).
const MIN_BODY_LIMIT: usize = 4 << 20;

/// Body bytes allowed per token of the context window: generous (JSON escapes a non-ASCII
/// character as up to 12 bytes, and a token covers several characters), so that every body
/// whose conversation can fit is read, and one that cannot is refused before it is parsed.
const BODY_BYTES_PER_TOKEN: usize = 64;

/// Request bodies up to this size are read when the context window is unknown.
const UNBOUNDED_BODY_LIMIT: usize = 256 << 20;

/// Gateway settings. Every field has a default; unknown keys are errors.
///
/// ```
/// use uniagent_gateway::GatewayConfig;
/// let config = GatewayConfig::from_yaml("model_name: policy\nmax_model_len: 4096\n").unwrap();
/// assert_eq!(config.model_name, "policy");
/// assert!(GatewayConfig::from_yaml("max_model_lenn: 1").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// The model name `models` lists and responses carry.
    pub model_name: String,
    /// Context window: prompt plus response tokens of a chain. `uniagent gateway` sets it,
    /// when the config leaves it unset, from the model directory's `config.json`
    /// ([`model_context_len`](crate::model_context_len)).
    pub max_model_len: Option<usize>,
    /// New tokens per request when the client asks for none.
    pub default_max_tokens: usize,
    /// The most new tokens one request may generate, whatever its `max_tokens` says (a larger
    /// request is clamped, as is one past the context left; the answer then ends with
    /// `finish_reason: length`).
    pub max_tokens_cap: usize,
    /// Host names answered besides IP addresses and `localhost` (the `Host` check that stops
    /// DNS-rebinding pages; cross-origin requests are refused whatever this says).
    pub allowed_hosts: Vec<String>,
    /// Tool-call text format of the policy (`hermes`, `qwen3_coder`), or `null` for none.
    pub tool_parser: Option<ToolCallFormat>,
    /// Extra chat-template variables (`enable_thinking`, ...).
    pub template_kwargs: Map<String, Value>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            model_name: "uniagent-policy".into(),
            max_model_len: None,
            default_max_tokens: 1024,
            max_tokens_cap: DEFAULT_MAX_TOKENS_CAP,
            allowed_hosts: Vec::new(),
            tool_parser: Some(ToolCallFormat::Hermes),
            template_kwargs: Map::new(),
        }
    }
}

impl GatewayConfig {
    /// Parses YAML (JSON is YAML).
    pub fn from_yaml(text: &str) -> Result<Self> {
        uniagent_core::config::check_nesting(text)
            .map_err(|e| GatewayError::invalid(format!("gateway config: {e}")))?;
        let config: Self = serde_norway::from_str(text)
            .map_err(|e| GatewayError::invalid(format!("gateway config: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a config file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| GatewayError::invalid(format!("cannot read {}: {e}", path.display())))?;
        Self::from_yaml(&text)
    }

    fn validate(&self) -> Result<()> {
        if self.default_max_tokens == 0 {
            return Err(GatewayError::invalid(
                "gateway config: default_max_tokens must be at least 1",
            ));
        }
        if self.max_tokens_cap == 0 {
            return Err(GatewayError::invalid(
                "gateway config: max_tokens_cap must be at least 1",
            ));
        }
        if self.default_max_tokens > self.max_tokens_cap {
            return Err(GatewayError::invalid(format!(
                "gateway config: default_max_tokens ({}) is above max_tokens_cap ({})",
                self.default_max_tokens, self.max_tokens_cap
            )));
        }
        if self.max_model_len == Some(0) {
            return Err(GatewayError::invalid(
                "gateway config: max_model_len must be at least 1",
            ));
        }
        Ok(())
    }

    /// The largest request body read (413 above it): what a conversation filling
    /// `max_model_len` tokens can take, at least 4 MiB; 256 MiB when the window is unknown.
    ///
    /// ```
    /// use uniagent_gateway::GatewayConfig;
    /// let config = GatewayConfig::from_yaml("max_model_len: 131072").unwrap();
    /// assert_eq!(config.body_limit(), 131072 * 64);
    /// assert_eq!(GatewayConfig::from_yaml("max_model_len: 512").unwrap().body_limit(), 4 << 20);
    /// ```
    pub fn body_limit(&self) -> usize {
        match self.max_model_len {
            Some(len) => len
                .saturating_mul(BODY_BYTES_PER_TOKEN)
                .clamp(MIN_BODY_LIMIT, UNBOUNDED_BODY_LIMIT),
            None => UNBOUNDED_BODY_LIMIT,
        }
    }

    /// New tokens a request may generate: its `max_tokens` (or `default_max_tokens`), at most
    /// `max_tokens_cap`.
    ///
    /// ```
    /// use uniagent_gateway::GatewayConfig;
    /// let config = GatewayConfig::default();
    /// assert_eq!(config.requested_tokens(Some(4_294_967_295)), config.max_tokens_cap);
    /// assert_eq!(config.requested_tokens(None), config.default_max_tokens);
    /// ```
    pub fn requested_tokens(&self, max_tokens: Option<usize>) -> usize {
        max_tokens
            .unwrap_or(self.default_max_tokens)
            .min(self.max_tokens_cap)
    }

    /// The length limits of every chain.
    pub fn limits(&self) -> LengthLimits {
        LengthLimits {
            max_model_len: self.max_model_len,
            ..LengthLimits::default()
        }
    }
}
