//! Helpers shared by the model/generation/trainer tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;

use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};

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

/// The Python of `.venv-torch` when `UNIAGENT_TORCH_VENV` is set (it must then exist); `None`
/// (with a printed reason) outside `scripts/test`.
pub fn torch_python() -> Option<PathBuf> {
    match std::env::var_os("UNIAGENT_TORCH_VENV") {
        None => {
            eprintln!("skipped: UNIAGENT_TORCH_VENV is not set (run through scripts/test or source scripts/env/torch.sh)");
            None
        }
        Some(venv) => {
            let python = PathBuf::from(venv).join("bin/python");
            assert!(
                python.is_file(),
                "UNIAGENT_TORCH_VENV is set but {} does not exist: run scripts/setup/30-torch.sh",
                python.display()
            );
            Some(python)
        }
    }
}
