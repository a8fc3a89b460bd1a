//! What a run leaves on disk besides metrics and the learning curve: the Hugging Face export.

use std::path::Path;

use uniagent_core::{Error, Result};

use crate::model::Qwen2ForCausalLM;

/// Writes `policy` as a Hugging Face folder that transformers and
/// [`Qwen2ForCausalLM::load`] read: `config.json` and `generation_config.json` carrying
/// `eos_token_id` (so that `generate` stops at the end-of-turn token), `model.safetensors`,
/// and the tokenizer files (`tokenizer.json`, `tokenizer_config.json`,
/// `chat_template.jinja`) copied from `tokenizer_dir` where present.
pub fn export_hf(
    policy: &Qwen2ForCausalLM,
    eos_token_id: u32,
    tokenizer_dir: Option<&Path>,
    dir: &Path,
) -> Result<()> {
    policy.save_pretrained(dir)?;
    let io = |what: &str, e: std::io::Error| Error::io(format!("{what} in {}", dir.display()), e);
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| io("reading config.json", e))?;
    let mut config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::internal(format!("config.json we wrote is not JSON: {e}")))?;
    config["eos_token_id"] = eos_token_id.into();
    std::fs::write(&path, config.to_string()).map_err(|e| io("writing config.json", e))?;
    let generation = serde_json::json!({
        "eos_token_id": eos_token_id,
        "bos_token_id": config["bos_token_id"],
        "_from_model_config": false,
    });
    std::fs::write(dir.join("generation_config.json"), generation.to_string())
        .map_err(|e| io("writing generation_config.json", e))?;
    if let Some(src) = tokenizer_dir {
        let same = src.canonicalize().ok() == dir.canonicalize().ok();
        for file in [
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
        ] {
            if !same && src.join(file).exists() {
                std::fs::copy(src.join(file), dir.join(file))
                    .map_err(|e| io(&format!("copying {file}"), e))?;
            }
        }
    }
    Ok(())
}
