//! [`model_context_len`]: the context window a Hugging Face model directory declares.

use std::path::Path;

use serde_json::Value;

/// `tokenizer_config.json`'s `model_max_length` is taken only below this: tokenizers without a
/// limit write a placeholder (transformers' `VERY_LARGE_INTEGER`, 10^30).
const MAX_SANE_TOKENIZER_LEN: u64 = 10_000_000;

/// The context window (tokens) of the model in `dir`, the default of
/// [`GatewayConfig::max_model_len`](crate::GatewayConfig::max_model_len) when the gateway
/// config leaves it unset.
///
/// The value is `config.json`'s `max_position_embeddings` (or that of its `text_config`, as
/// multimodal checkpoints nest it), a positive integer. Without one, it is
/// `tokenizer_config.json`'s `model_max_length` when that is a positive integer below 10^7.
/// `None` when neither file gives one (missing or unreadable files count as giving none).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("config.json"), r#"{"max_position_embeddings": 32768}"#).unwrap();
/// assert_eq!(uniagent_gateway::model_context_len(dir.path()), Some(32768));
/// ```
pub fn model_context_len(dir: &Path) -> Option<usize> {
    let positive = |v: &Value| v.as_u64().filter(|&n| n > 0);
    let from_config = read_json(&dir.join("config.json")).and_then(|config| {
        positive(&config["max_position_embeddings"])
            .or_else(|| positive(&config["text_config"]["max_position_embeddings"]))
    });
    let len = from_config.or_else(|| {
        read_json(&dir.join("tokenizer_config.json")).and_then(|tokenizer| {
            positive(&tokenizer["model_max_length"]).filter(|&n| n < MAX_SANE_TOKENIZER_LEN)
        })
    })?;
    usize::try_from(len).ok()
}

fn read_json(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn config_json_gives_the_window() {
        let dir = dir_with(&[
            (
                "config.json",
                r#"{"model_type": "qwen2", "max_position_embeddings": 32768}"#,
            ),
            ("tokenizer_config.json", r#"{"model_max_length": 131072}"#),
        ]);
        assert_eq!(model_context_len(dir.path()), Some(32768));
        let nested = dir_with(&[(
            "config.json",
            r#"{"text_config": {"max_position_embeddings": 8192}}"#,
        )]);
        assert_eq!(model_context_len(nested.path()), Some(8192));
    }

    #[test]
    fn tokenizer_config_is_the_fallback_when_sane() {
        let dir = dir_with(&[
            ("config.json", r#"{"model_type": "qwen2"}"#),
            ("tokenizer_config.json", r#"{"model_max_length": 131072}"#),
        ]);
        assert_eq!(model_context_len(dir.path()), Some(131072));
        // transformers' placeholder for "no limit", a float and a zero are not windows.
        for bad in [
            "1000000000000000019884624838656",
            "10000000",
            "4096.5",
            "0",
            "-1",
            "\"4096\"",
        ] {
            let dir = dir_with(&[(
                "tokenizer_config.json",
                &format!(r#"{{"model_max_length": {bad}}}"#),
            )]);
            assert_eq!(model_context_len(dir.path()), None, "{bad}");
        }
        let below = dir_with(&[("tokenizer_config.json", r#"{"model_max_length": 9999999}"#)]);
        assert_eq!(model_context_len(below.path()), Some(9_999_999));
    }

    #[test]
    fn missing_or_broken_files_give_none() {
        let empty = dir_with(&[]);
        assert_eq!(model_context_len(empty.path()), None);
        assert_eq!(model_context_len(&empty.path().join("absent")), None);
        let broken = dir_with(&[
            ("config.json", "{not json"),
            ("tokenizer_config.json", r#"{"model_max_length": 2048}"#),
        ]);
        assert_eq!(model_context_len(broken.path()), Some(2048));
        let zero = dir_with(&[("config.json", r#"{"max_position_embeddings": 0}"#)]);
        assert_eq!(model_context_len(zero.path()), None);
    }
}
