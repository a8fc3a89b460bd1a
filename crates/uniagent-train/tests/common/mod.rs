//! Helpers shared by the model/generation/trainer tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;

use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};

mod venv;
// Not every test binary that includes these helpers calls it.
#[allow(unused_imports)]
pub use venv::torch_python;

/// The tiny Qwen2 fixture copied into this crate.
pub fn tiny_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2")
}

pub fn tiny_model() -> Qwen2ForCausalLM {
    Qwen2ForCausalLM::load(&tiny_dir(), tch::Device::Cpu, ModelDtype::F32).unwrap()
}

pub fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(tiny_dir().join("reference_logits.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn ids_of(value: &serde_json::Value) -> Vec<i64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect()
}

pub fn floats_of(value: &serde_json::Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}
