//! [`GatewayConfig`]: the `--config FILE` of `uniagent gateway` (YAML or JSON).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::LengthLimits;

use crate::error::{GatewayError, Result};

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
    /// Context window: prompt plus response tokens of a chain.
    pub max_model_len: Option<usize>,
    /// New tokens per request when the client asks for none.
    pub default_max_tokens: usize,
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
            tool_parser: Some(ToolCallFormat::Hermes),
            template_kwargs: Map::new(),
        }
    }
}

impl GatewayConfig {
    /// Parses YAML (JSON is YAML).
    pub fn from_yaml(text: &str) -> Result<Self> {
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
        if self.max_model_len == Some(0) {
            return Err(GatewayError::invalid(
                "gateway config: max_model_len must be at least 1",
            ));
        }
        Ok(())
    }

    /// The length limits of every chain.
    pub fn limits(&self) -> LengthLimits {
        LengthLimits {
            max_model_len: self.max_model_len,
            ..LengthLimits::default()
        }
    }
}
