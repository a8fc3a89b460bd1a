//! Reading and writing Hugging Face safetensors checkpoints (single file or sharded with
//! `model.safetensors.index.json`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use tch::nn::VarStore;
use tch::Tensor;
use uniagent_core::{Error, Result};

use super::tch_error;

/// The safetensors files of a checkpoint folder: `model.safetensors`, or the shards named in
/// `model.safetensors.index.json`.
pub(crate) fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|e| {
        Error::io(
            format!("reading {} (no model.safetensors either)", index.display()),
            e,
        )
    })?;
    let parsed: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Config {
        message: format!("{} is not valid JSON: {e}", index.display()),
        source: Some(Box::new(e)),
    })?;
    let map = parsed
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::Config {
            message: format!("{} has no `weight_map` object", index.display()),
            source: None,
        })?;
    let mut shards = BTreeSet::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .filter(|f| !f.contains('/') && !f.contains(".."))
            .ok_or_else(|| Error::Config {
                message: format!("{}: bad shard name for `{name}`", index.display()),
                source: None,
            })?;
        shards.insert(file.to_string());
    }
    Ok(shards.into_iter().map(|f| dir.join(f)).collect())
}

/// Copies every tensor of the checkpoint into the variable of the same name (converting dtype
/// and device). Tensors the store does not have (e.g. `lm_head.weight` of a tied model) are
/// skipped; a variable no file provides, or a shape mismatch, is an error.
pub(crate) fn load_into(vs: &VarStore, dir: &Path) -> Result<()> {
    let mut variables: HashMap<String, Tensor> = vs.variables();
    let mut missing: BTreeSet<String> = variables.keys().cloned().collect();
    for file in checkpoint_files(dir)? {
        let tensors = Tensor::read_safetensors(&file)
            .map_err(tch_error(format!("reading {}", file.display())))?;
        for (name, tensor) in tensors {
            let Some(var) = variables.get_mut(&name) else {
                continue;
            };
            if var.size() != tensor.size() {
                return Err(Error::Config {
                    message: format!(
                        "{}: `{name}` has shape {:?}, the config implies {:?}",
                        file.display(),
                        tensor.size(),
                        var.size()
                    ),
                    source: None,
                });
            }
            tch::no_grad(|| var.f_copy_(&tensor))
                .map_err(tch_error(format!("loading `{name}`")))?;
            missing.remove(&name);
        }
    }
    if let Some(name) = missing.iter().next() {
        return Err(Error::Config {
            message: format!(
                "{}: checkpoint lacks `{name}` ({} missing tensors)",
                dir.display(),
                missing.len()
            ),
            source: None,
        });
    }
    Ok(())
}

/// Writes every variable of the store to `dir/model.safetensors` (contiguous, on CPU, in the
/// store's dtype), with Hugging Face names.
pub(crate) fn save_from(vs: &VarStore, dir: &Path) -> Result<()> {
    let mut named: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .map(|(name, t)| (name, t.detach().to_device(tch::Device::Cpu).contiguous()))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let path = dir.join("model.safetensors");
    Tensor::write_safetensors(&named, &path)
        .map_err(tch_error(format!("writing {}", path.display())))
}
