//! The policy network: a Qwen2-architecture causal LM in tch, loaded from Hugging Face
//! `config.json` + safetensors.

mod config;
mod layers;
mod qwen2;
mod weights;

pub use config::Qwen2Config;
pub use qwen2::{KvCache, Qwen2ForCausalLM};

use serde::{Deserialize, Serialize};
use tch::Kind;
use uniagent_core::Error;

/// Parameter dtype of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelDtype {
    /// float32.
    F32,
    /// bfloat16 (norms and softmax still computed in float32).
    Bf16,
}

impl ModelDtype {
    /// The libtorch kind.
    pub fn kind(self) -> Kind {
        match self {
            Self::F32 => Kind::Float,
            Self::Bf16 => Kind::BFloat16,
        }
    }

    /// The name transformers uses (`float32`, `bfloat16`).
    pub fn hf_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::Bf16 => "bfloat16",
        }
    }
}

impl std::str::FromStr for ModelDtype {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "float32" | "f32" | "fp32" => Ok(Self::F32),
            "bfloat16" | "bf16" => Ok(Self::Bf16),
            other => Err(Error::invalid_input(format!(
                "unsupported dtype `{other}` (float32 or bfloat16)"
            ))),
        }
    }
}

/// How the policy computes attention.
///
/// Both give the same numerics up to float rounding (the model-parity tests check each against
/// transformers); they differ in memory. [`Eager`](Self::Eager) materialises the
/// `[batch, heads, queries, keys]` scores and several copies of them, so a pass grows with the
/// square of its length; [`Sdpa`](Self::Sdpa) goes through libtorch's
/// `scaled_dot_product_attention`, which on unpadded prefills and decoding steps uses a fused
/// kernel that never holds the scores, and bounds what padded passes hold by splitting their
/// queries into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionImpl {
    /// transformers' eager attention, operation by operation (the reference, and the default:
    /// training keeps the numerics its figures were measured with).
    #[default]
    Eager,
    /// libtorch's `scaled_dot_product_attention`: what the gateway's engine serves with, where
    /// prompts are long and memory grows with their square under eager attention.
    Sdpa,
}

impl std::str::FromStr for AttentionImpl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "eager" => Ok(Self::Eager),
            "sdpa" => Ok(Self::Sdpa),
            other => Err(Error::invalid_input(format!(
                "unknown attention `{other}` (eager or sdpa)"
            ))),
        }
    }
}

/// Maps a libtorch error to [`Error::Model`] with backend `tch` and some context.
pub(crate) fn tch_error(context: impl Into<String>) -> impl FnOnce(tch::TchError) -> Error {
    let context = context.into();
    move |e| Error::Model {
        backend: "tch".into(),
        message: format!("{context}: {e}"),
        retryable: false,
        source: Some(Box::new(e)),
    }
}
