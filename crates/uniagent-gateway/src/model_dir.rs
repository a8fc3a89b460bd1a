//! Serving a Hugging Face model directory on CPU with uniagent-train's tch engine.

use std::path::Path;
use std::sync::Arc;

use uniagent_core::codec::Codec;
use uniagent_core::TokenGenerator;
use uniagent_train::generate::{EngineConfig, TchEngine};
use uniagent_train::model::AttentionImpl;
use uniagent_train::scratch::load_hf;
use uniagent_train::tch::Device;

use crate::error::{GatewayError, Result};

/// Loads `dir` (`config.json`, safetensors, `tokenizer.json`, `tokenizer_config.json` and its
/// chat template) and starts a [`TchEngine`] on it, with SDPA attention.
pub fn load_model_dir(dir: &Path) -> Result<(Codec, Arc<dyn TokenGenerator>)> {
    let (codec, mut model) = load_hf(dir, Device::Cpu).map_err(|e| {
        GatewayError::invalid(format!(
            "cannot load the model directory {}: {e}",
            dir.display()
        ))
    })?;
    // Harness prompts are long: attention that does not hold `[T, T]` scores (the same
    // numerics up to float rounding; training keeps the eager reference).
    model.set_attention(AttentionImpl::Sdpa);
    let engine = TchEngine::new(model, EngineConfig::default());
    Ok((codec, Arc::new(engine)))
}
