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
