//! [`AdamW`] with its state in the open: tch's optimizer keeps the moments inside libtorch
//! with no way to read them, so a run that must be checkpointed and resumed needs its own.

use std::collections::BTreeMap;
use std::path::Path;

use tch::nn::VarStore;
use tch::Tensor;
use uniagent_core::{Error, Result};

use super::config::OptimConfig;
use crate::model::tch_error;

/// The moments of one parameter.
#[derive(Debug)]
struct Moments {
    /// Steps this parameter took (it skips steps where it had no gradient, as torch does).
    step: i64,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
}

/// Decoupled-weight-decay Adam, the update of libtorch's `torch::optim::AdamW` (also
/// PyTorch's single-tensor `AdamW`): per parameter with a gradient,
/// `p ← p·(1 − lr·wd)`, `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`,
/// `p ← p − lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + ε)`.
///
/// Weight decay applies to matrices only (two or more dimensions: projections and
/// embeddings), never to norm weights or biases: the same split as the model's decay groups.
/// The state is saved and loaded by parameter name, so a resumed run continues exactly.
#[derive(Debug)]
pub(crate) struct AdamW {
    config: OptimConfig,
    lr: f64,
    state: BTreeMap<String, Moments>,
}

impl AdamW {
    pub(crate) fn new(config: OptimConfig, lr: f64) -> Self {
        Self {
            config,
            lr,
            state: BTreeMap::new(),
        }
    }

    pub(crate) fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// The trainable parameters of `vs` by name, in name order (a fixed order keeps runs
    /// reproducible whatever the hash map does).
    fn parameters(vs: &VarStore) -> Vec<(String, Tensor)> {
        let mut params: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        params
    }

    /// One update of every trainable parameter of `vs` that has a gradient.
    pub(crate) fn step(&mut self, vs: &VarStore) {
        let c = self.config;
        tch::no_grad(|| {
            for (name, mut p) in Self::parameters(vs) {
                let g = p.grad();
                if !g.defined() {
                    continue;
                }
                if c.weight_decay != 0.0 && p.dim() >= 2 {
                    let _ = p.g_mul_scalar_(1.0 - self.lr * c.weight_decay);
                }
                let m = self.state.entry(name).or_insert_with(|| Moments {
                    step: 0,
                    exp_avg: p.zeros_like(),
                    exp_avg_sq: p.zeros_like(),
                });
                m.step += 1;
                let bias1 = 1.0 - c.beta1.powi(m.step as i32);
                let bias2 = 1.0 - c.beta2.powi(m.step as i32);
                let _ = m.exp_avg.g_mul_scalar_(c.beta1);
                let _ = m.exp_avg.g_add_(&(&g * (1.0 - c.beta1)));
                let _ = m.exp_avg_sq.g_mul_scalar_(c.beta2);
                let _ = m.exp_avg_sq.g_add_(&(&g * &g * (1.0 - c.beta2)));
                let denom = m.exp_avg_sq.sqrt() / bias2.sqrt() + c.eps;
                let _ = p.g_sub_(&(&m.exp_avg / denom * (self.lr / bias1)));
            }
        });
    }

    /// Clears the gradients of every trainable parameter.
    pub(crate) fn zero_grad(vs: &VarStore) {
        for (_, mut p) in Self::parameters(vs) {
            p.zero_grad();
        }
    }

    /// Writes the moments and step counts to `path` (safetensors: `exp_avg.NAME`,
    /// `exp_avg_sq.NAME`, `step.NAME`).
    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        let mut named: Vec<(String, Tensor)> = Vec::with_capacity(self.state.len() * 3);
        for (name, m) in &self.state {
            named.push((
                format!("exp_avg.{name}"),
                m.exp_avg.to_device(tch::Device::Cpu),
            ));
            named.push((
                format!("exp_avg_sq.{name}"),
                m.exp_avg_sq.to_device(tch::Device::Cpu),
            ));
            named.push((format!("step.{name}"), Tensor::from(m.step)));
        }
        Tensor::write_safetensors(&named, path)
            .map_err(tch_error(&format!("writing {}", path.display())))
    }

    /// Reads what [`Self::save`] wrote, placing the moments on the device of `vs`'s
    /// parameters; every saved name must be a trainable parameter of the same shape.
    pub(crate) fn load(&mut self, path: &Path, vs: &VarStore) -> Result<()> {
        let tensors = Tensor::read_safetensors(path)
            .map_err(tch_error(&format!("reading {}", path.display())))?;
        let params: BTreeMap<String, Tensor> = Self::parameters(vs).into_iter().collect();
        // Per parameter: (exp_avg, exp_avg_sq, step), as found.
        type Parts = (Option<Tensor>, Option<Tensor>, Option<i64>);
        let mut parts: BTreeMap<String, Parts> = BTreeMap::new();
        for (key, t) in tensors {
            let (what, name) = key.split_once('.').ok_or_else(|| {
                Error::invalid_input(format!("{}: unexpected tensor `{key}`", path.display()))
            })?;
            let entry = parts.entry(name.to_owned()).or_default();
            match what {
                "exp_avg" => entry.0 = Some(t),
                "exp_avg_sq" => entry.1 = Some(t),
                "step" => entry.2 = Some(t.int64_value(&[])),
                _ => {
                    return Err(Error::invalid_input(format!(
                        "{}: unexpected tensor `{key}`",
                        path.display()
                    )))
                }
            }
        }
        let mut state = BTreeMap::new();
        for (name, (exp_avg, exp_avg_sq, step)) in parts {
            let p = params.get(&name).ok_or_else(|| {
                Error::invalid_input(format!(
                    "{}: optimizer state for `{name}`, which the policy does not have",
                    path.display()
                ))
            })?;
            let (Some(exp_avg), Some(exp_avg_sq), Some(step)) = (exp_avg, exp_avg_sq, step) else {
                return Err(Error::invalid_input(format!(
                    "{}: incomplete optimizer state for `{name}`",
                    path.display()
                )));
            };
            if exp_avg.size() != p.size() || exp_avg_sq.size() != p.size() {
                return Err(Error::invalid_input(format!(
                    "{}: optimizer state for `{name}` has shape {:?}, the parameter {:?}",
                    path.display(),
                    exp_avg.size(),
                    p.size()
                )));
            }
            let place = |t: Tensor| t.to_device(p.device()).to_kind(p.kind());
            state.insert(
                name,
                Moments {
                    step,
                    exp_avg: place(exp_avg),
                    exp_avg_sq: place(exp_avg_sq),
                },
            );
        }
        self.state = state;
        Ok(())
    }

    /// Parameters with state (for tests).
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.state.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::{self, OptimizerConfig};
    use tch::{Device, Kind};

    /// Values from a local generator: the tests run in parallel, so none may use libtorch's
    /// global seed.
    fn values(seed: u64, shape: &[i64]) -> Tensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n: i64 = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.f32() * 2.0 - 1.0).collect();
        Tensor::from_slice(&v).reshape(shape)
    }

    /// A store with a matrix `w` and a vector `b`, the same for the same seed.
    fn store(seed: u64) -> VarStore {
        let vs = VarStore::new(Device::Cpu);
        let root = vs.root();
        let mut w = root.zeros("w", &[4, 3]);
        let mut b = root.zeros("b", &[3]);
        tch::no_grad(|| {
            w.copy_(&values(seed, &[4, 3]));
            b.copy_(&values(seed + 1, &[3]));
        });
        vs
    }

    fn set_grads(vs: &VarStore, step: u64) {
        for (name, p) in AdamW::parameters(vs) {
            let g = values(step * 7 + name.len() as u64, &p.size());
            let mut grad = p.grad();
            if grad.defined() {
                tch::no_grad(|| {
                    grad.copy_(&g);
                });
            } else {
                // Creates the .grad tensor through a backward pass of a linear function.
                (&p * &g).sum(Kind::Float).backward();
            }
        }
    }

    fn max_abs_diff(a: &VarStore, b: &VarStore) -> f64 {
        let (pa, pb) = (AdamW::parameters(a), AdamW::parameters(b));
        pa.iter()
            .zip(&pb)
            .map(|((_, x), (_, y))| (x - y).abs().max().double_value(&[]))
            .fold(0.0, f64::max)
    }

    #[test]
    fn the_update_equals_libtorchs_adamw_with_decay_on_matrices_only() {
        let config = OptimConfig {
            lr: 1e-2,
            weight_decay: 0.1,
            ..OptimConfig::default()
        };
        let ours_vs = store(3);
        let theirs_vs = store(3);
        let mut ours = AdamW::new(config, config.lr);
        let mut theirs = nn::AdamW {
            beta1: config.beta1,
            beta2: config.beta2,
            wd: 0.0,
            eps: config.eps,
            amsgrad: false,
        }
        .build(&theirs_vs, config.lr)
        .unwrap();
        // libtorch decays every parameter of a group; the model puts matrices in one group
        // and vectors in another. Here, by hand: "w" decays, "b" does not.
        let w = theirs_vs.variables()["w"].shallow_clone();
        for step in 1..=6 {
            AdamW::zero_grad(&ours_vs);
            theirs.zero_grad();
            set_grads(&ours_vs, step);
            set_grads(&theirs_vs, step);
            ours.step(&ours_vs);
            // Decoupled decay first, as libtorch does it, then the Adam update.
            tch::no_grad(|| {
                let _ = w
                    .shallow_clone()
                    .g_mul_scalar_(1.0 - config.lr * config.weight_decay);
            });
            theirs.step();
            let diff = max_abs_diff(&ours_vs, &theirs_vs);
            assert!(diff < 1e-6, "step {step}: max |Δ| = {diff}");
        }
        assert_eq!(ours.tracked(), 2);
    }

    #[test]
    fn a_saved_and_loaded_state_continues_like_the_uninterrupted_optimizer() {
        let config = OptimConfig {
            lr: 5e-3,
            weight_decay: 0.01,
            ..OptimConfig::default()
        };
        let straight = store(5);
        let resumed = store(5);
        let mut a = AdamW::new(config, config.lr);
        let mut b = AdamW::new(config, config.lr);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optimizer.safetensors");
        for step in 1..=3 {
            for (vs, opt) in [(&straight, &mut a), (&resumed, &mut b)] {
                AdamW::zero_grad(vs);
                set_grads(vs, step);
                opt.step(vs);
            }
        }
        b.save(&path).unwrap();
        let mut b = AdamW::new(config, config.lr);
        b.load(&path, &resumed).unwrap();
        for step in 4..=6 {
            for (vs, opt) in [(&straight, &mut a), (&resumed, &mut b)] {
                AdamW::zero_grad(vs);
                set_grads(vs, step);
                opt.step(vs);
            }
            assert_eq!(max_abs_diff(&straight, &resumed), 0.0, "step {step}");
        }
        // A fresh optimizer (no moments) diverges: the state is what makes the difference.
        let fresh = store(5);
        let mut c = AdamW::new(config, config.lr);
        for step in 1..=3 {
            AdamW::zero_grad(&fresh);
            set_grads(&fresh, step);
            c.step(&fresh);
        }
        let mut c = AdamW::new(config, config.lr);
        for step in 4..=6 {
            AdamW::zero_grad(&fresh);
            set_grads(&fresh, step);
            c.step(&fresh);
        }
        assert!(max_abs_diff(&straight, &fresh) > 1e-5);
    }

    #[test]
    fn loading_a_state_for_another_model_is_a_clear_error() {
        let config = OptimConfig::default();
        let vs = store(1);
        let mut opt = AdamW::new(config, config.lr);
        set_grads(&vs, 1);
        opt.step(&vs);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optimizer.safetensors");
        opt.save(&path).unwrap();
        let other = VarStore::new(Device::Cpu);
        let _x = other.root().zeros("w", &[2, 2]);
        let err = AdamW::new(config, config.lr)
            .load(&path, &other)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shape") || err.contains("does not have"),
            "{err}"
        );
    }
}
