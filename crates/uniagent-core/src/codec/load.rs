//! Loading a [`Codec`] from a Hugging Face model directory.

use std::path::Path;

use serde_json::Value;

use super::{ChatTemplate, Codec, Globals};
use crate::error::{Error, Result};

const SPECIAL_TOKEN_KEYS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Codec {
        message: format!("cannot read {}: {e}", path.display()),
        source: Some(Box::new(e)),
    })?;
    serde_json::from_str(&text).map_err(|e| Error::Codec {
        message: format!("{} is not valid JSON: {e}", path.display()),
        source: Some(Box::new(e)),
    })
}

/// A special token as written in `tokenizer_config.json`: a string or an `AddedToken` object.
fn token_content(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// `chat_template` of `tokenizer_config.json`: a string, or a list of named templates of which
/// `default` is used.
fn template_from_config(config: &Value) -> Option<String> {
    match config.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

fn stop_ids_from_generation_config(dir: &Path) -> Result<Vec<u32>> {
    let path = dir.join("generation_config.json");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let config = read_json(&path)?;
    Ok(match config.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().map(|id| vec![id as u32]).unwrap_or_default(),
        Some(Value::Array(ids)) => ids
            .iter()
            .filter_map(Value::as_u64)
            .map(|id| id as u32)
            .collect(),
        _ => Vec::new(),
    })
}

impl Codec {
    /// Loads `tokenizer.json`, `tokenizer_config.json` (special tokens and `chat_template`),
    /// `chat_template.jinja` when present (it takes precedence, as in `transformers`) and the
    /// stop ids of `generation_config.json` when present.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer =
            tokenizers::Tokenizer::from_file(&tokenizer_path).map_err(|e| Error::Codec {
                message: format!("cannot load {}: {e}", tokenizer_path.display()),
                source: None,
            })?;
        let config = read_json(&dir.join("tokenizer_config.json"))?;
        let jinja_path = dir.join("chat_template.jinja");
        let source = if jinja_path.exists() {
            std::fs::read_to_string(&jinja_path).map_err(|e| Error::Codec {
                message: format!("cannot read {}: {e}", jinja_path.display()),
                source: Some(Box::new(e)),
            })?
        } else {
            template_from_config(&config).ok_or_else(|| Error::Codec {
                message: format!(
                    "{} has no chat template (neither chat_template.jinja nor `chat_template`)",
                    dir.display()
                ),
                source: None,
            })?
        };
        let mut globals = Globals::new();
        for key in SPECIAL_TOKEN_KEYS {
            if let Some(token) = config.get(key).and_then(token_content) {
                globals.insert(key.to_owned(), Value::String(token));
            }
        }
        if let Some(Value::Array(extra)) = config.get("additional_special_tokens") {
            let tokens: Vec<Value> = extra
                .iter()
                .filter_map(token_content)
                .map(Value::String)
                .collect();
            globals.insert("additional_special_tokens".into(), Value::Array(tokens));
        }
        let eos = globals.get("eos_token").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| Error::Codec {
            message: "tokenizer_config.json has no `eos_token`; the end of an assistant turn is unknown".into(),
            source: None,
        })?;
        let template = ChatTemplate::new(source, globals)?;
        let stop = stop_ids_from_generation_config(dir)?;
        Codec::new(tokenizer, template, eos, &stop)
    }
}
