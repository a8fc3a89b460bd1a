//! The Hugging Face `config.json` of a Qwen2 model.

use std::path::Path;

use serde::{Deserialize, Serialize};
use uniagent_core::{Error, Result};

/// The fields of a Hugging Face Qwen2 `config.json` that the architecture needs.
///
/// Unknown keys are ignored on purpose: `config.json` files carry many keys (`layer_types`,
/// `transformers_version`, ...) that do not change the computation. Keys that would change it
/// and are not supported (sliding-window attention, RoPE scaling) are rejected by
/// [`validate`](Self::validate).
///
/// ```
/// use uniagent_train::model::Qwen2Config;
/// let config: Qwen2Config = serde_json::from_str(r#"{"vocab_size": 100, "hidden_size": 8,
///     "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
///     "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "rope_theta": 1e6}"#).unwrap();
/// assert_eq!(config.rope_base(), 1e6);
/// assert_eq!(config.head_dim(), 4);
/// assert!(config.tie_word_embeddings);
/// config.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Qwen2Config {
    /// Rows of the embedding and output matrices.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); defaults to `num_attention_heads`.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base (transformers 4.x writes it at the top level); see [`rope_base`](Self::rope_base).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// RoPE parameters (transformers 5.x writes `{"rope_type": "default", "rope_theta": ..}`).
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    /// Longest supported context.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// The output projection is the embedding matrix.
    #[serde(default = "default_tie")]
    pub tie_word_embeddings: bool,
    /// Activation of the MLP; only `silu` is supported.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Sliding-window attention switch; only `false` is supported.
    #[serde(default)]
    pub use_sliding_window: bool,
    /// RoPE scaling; only `null` or the `default` type is supported.
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    /// End-of-sequence id(s), as written by transformers.
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    /// Beginning-of-sequence id.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_max_positions() -> usize {
    32_768
}
fn default_tie() -> bool {
    true
}
fn default_act() -> String {
    "silu".to_string()
}

impl Qwen2Config {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let config: Self = serde_json::from_str(&text).map_err(|e| Error::Config {
            message: format!("{} is not a Qwen2 config.json: {e}", path.display()),
            source: Some(Box::new(e)),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// The RoPE base: `rope_theta`, else `rope_parameters.rope_theta`, else 10000 (the
    /// transformers default).
    pub fn rope_base(&self) -> f64 {
        self.rope_theta
            .or_else(|| {
                self.rope_parameters
                    .as_ref()
                    .and_then(|p| p.get("rope_theta"))
                    .and_then(|v| v.as_f64())
            })
            .unwrap_or(10_000.0)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// Checks that the shapes are consistent and that no unsupported feature is asked for.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| {
            Err(Error::Config {
                message,
                source: None,
            })
        };
        if self.vocab_size == 0 || self.hidden_size == 0 || self.num_hidden_layers == 0 {
            return bad("vocab_size, hidden_size and num_hidden_layers must be > 0".into());
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return bad(format!(
                "head dim {} must be even for RoPE",
                self.head_dim()
            ));
        }
        let kv = self.kv_heads();
        if kv == 0 || !self.num_attention_heads.is_multiple_of(kv) {
            return bad(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {kv}",
                self.num_attention_heads
            ));
        }
        if self.hidden_act != "silu" {
            return bad(format!(
                "hidden_act `{}` is not supported (only silu)",
                self.hidden_act
            ));
        }
        if self.use_sliding_window {
            return bad("use_sliding_window = true is not supported".into());
        }
        let scaling_type = self
            .rope_scaling
            .as_ref()
            .filter(|v| !v.is_null())
            .map(|v| {
                v.get("rope_type")
                    .or_else(|| v.get("type"))
                    .and_then(|t| t.as_str())
                    .unwrap_or("?")
                    .to_string()
            });
        if scaling_type.as_ref().is_some_and(|t| t != "default") {
            return bad(format!(
                "rope_scaling `{}` is not supported",
                scaling_type.unwrap_or_default()
            ));
        }
        let rope_type = self
            .rope_parameters
            .as_ref()
            .and_then(|p| p.get("rope_type"))
            .and_then(|v| v.as_str());
        if rope_type.is_some_and(|t| t != "default") {
            return bad(format!(
                "rope_type `{}` is not supported (only default)",
                rope_type.unwrap_or_default()
            ));
        }
        if !(self.rms_norm_eps > 0.0 && self.rope_base() > 0.0) {
            return bad("rms_norm_eps and rope_theta must be > 0".into());
        }
        Ok(())
    }

    /// The `config.json` transformers reads back (`Qwen2ForCausalLM`, float32 or bfloat16).
    pub fn to_hf_json(&self, dtype: &str) -> serde_json::Value {
        serde_json::json!({
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.kv_heads(),
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_base(),
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_base()},
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": self.hidden_act,
            "use_sliding_window": false,
            "sliding_window": null,
            "rope_scaling": null,
            "attention_dropout": 0.0,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": dtype,
            "dtype": dtype,
        })
    }
}
