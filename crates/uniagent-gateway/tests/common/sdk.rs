//! Parts of the tests that drive the gateway with the official Python SDKs over the tiny
//! random-weight Qwen2 model.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A client script of `tests/clients`.
pub fn client_script(name: &str) -> PathBuf {
    repo("tests/clients").join(name)
}

/// Fills `dir` as a Hugging Face directory: the tiny model's weights with the Qwen2.5
/// tokenizer and template.
pub fn tiny_model_dir(dir: &Path) {
    let model = repo("../uniagent-train/tests/fixtures/tiny-qwen2");
    let tok = repo("../uniagent-core/tests/fixtures/tokenizers/qwen2.5");
    for (from, name) in [
        (&model, "config.json"),
        (&model, "model.safetensors"),
        (&model, "generation_config.json"),
        (&tok, "tokenizer.json"),
        (&tok, "tokenizer_config.json"),
        (&tok, "chat_template.jinja"),
    ] {
        std::os::unix::fs::symlink(from.join(name), dir.join(name)).unwrap();
    }
}

/// The Python of the venv named by `var`, or `None` (the test skips, saying so) when `var`
/// is unset; panics when it is set and the venv is missing.
pub fn venv_python(var: &str, setup: &str) -> Option<PathBuf> {
    let Ok(venv) = std::env::var(var) else {
        eprintln!("skipped: {var} is not set ({setup})");
        return None;
    };
    let python = Path::new(&venv).join("bin/python");
    assert!(
        python.exists(),
        "{var}={venv} has no bin/python: run {setup}"
    );
    Some(python)
}

/// A trajectory's token list `key` (`prompt_ids`, `response_ids`, `response_mask`).
pub fn ids(t: &Value, key: &str) -> Vec<u32> {
    t[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// The token runs of a trajectory's response whose mask is 1 (the sampled turns).
pub fn sampled_runs(t: &Value) -> Vec<Vec<u32>> {
    let mut runs: Vec<Vec<u32>> = Vec::new();
    let mut prev = 0;
    for (id, m) in ids(t, "response_ids")
        .into_iter()
        .zip(ids(t, "response_mask"))
    {
        if m == 1 {
            if prev == 0 {
                runs.push(Vec::new());
            }
            if let Some(run) = runs.last_mut() {
                run.push(id);
            }
        }
        prev = m;
    }
    runs
}
