//! Shared helpers of the codec tests: the tokenizer fixtures and golden cases as codec input.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::Value;
use uniagent_core::codec::ChatInput;

/// The Qwen2.5 or Qwen3 tokenizer and chat template fixture directory.
pub fn tokenizer_dir(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenizers")
        .join(family)
}

/// A golden file's case (`messages`, `tools`, `add_generation_prompt`, `template_kwargs`) as
/// the codec's input.
pub fn input_of(case: &Value) -> ChatInput {
    ChatInput {
        messages: case["messages"].as_array().unwrap().clone(),
        tools: case["tools"].as_array().cloned().unwrap_or_default(),
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        template_kwargs: case["template_kwargs"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
    }
}
