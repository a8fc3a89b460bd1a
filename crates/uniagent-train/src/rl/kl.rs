//! KL estimators (`kl_penalty`) with verl 0.9.1's semantics, and entropy from logits.

use std::fmt;
use std::str::FromStr;

use tch::Tensor;

use super::error::{expect_shape, RlError, RlResult};

/// The base estimator of a [`KlEstimator`], with `d = logp − ref`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KlKind {
    /// `k1` (`kl`): `d`.
    K1,
    /// `abs`: `|d|`.
    Abs,
    /// `k2` (`mse`): `½ d²`.
    K2,
    /// `k3` (`low_var_kl`): `x = clamp(−d, −20, 20)`, `clamp(eˣ − x − 1, −10, 10)`.
    K3,
}

/// A KL estimator as verl names it: a [`KlKind`], and with a trailing `+` the straight-through
/// variant whose value is the estimator's and whose gradient is `k2`'s:
/// `k2 − sg(k2) + sg(estimator)`.
///
/// ```
/// use uniagent_train::rl::{KlEstimator, KlKind};
/// let e: KlEstimator = "low_var_kl".parse()?;
/// assert_eq!(e, KlEstimator { kind: KlKind::K3, straight_through: false });
/// let e: KlEstimator = "k3+".parse()?;
/// assert!(e.straight_through);
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KlEstimator {
    /// The value's estimator.
    pub kind: KlKind,
    /// Whether the gradient is `k2`'s (the `+` suffix).
    pub straight_through: bool,
}

impl KlEstimator {
    /// The plain estimator `kind`.
    pub const fn plain(kind: KlKind) -> Self {
        KlEstimator {
            kind,
            straight_through: false,
        }
    }
}

impl FromStr for KlEstimator {
    type Err = RlError;

    fn from_str(s: &str) -> RlResult<Self> {
        let (base, straight_through) = match s.strip_suffix('+') {
            Some(base) => (base, true),
            None => (s, false),
        };
        let kind = match base {
            "kl" | "k1" => KlKind::K1,
            "abs" => KlKind::Abs,
            "mse" | "k2" => KlKind::K2,
            "low_var_kl" | "k3" => KlKind::K3,
            _ => {
                return Err(RlError::UnknownName {
                    kind: "KL estimator",
                    name: s.to_owned(),
                })
            }
        };
        Ok(KlEstimator {
            kind,
            straight_through,
        })
    }
}

impl fmt::Display for KlEstimator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = match self.kind {
            KlKind::K1 => "k1",
            KlKind::Abs => "abs",
            KlKind::K2 => "k2",
            KlKind::K3 => "k3",
        };
        write!(f, "{base}{}", if self.straight_through { "+" } else { "" })
    }
}

fn forward(kind: KlKind, logp: &Tensor, ref_logp: &Tensor) -> Tensor {
    match kind {
        KlKind::K1 => logp - ref_logp,
        KlKind::Abs => (logp - ref_logp).abs(),
        KlKind::K2 => (logp - ref_logp).square() * 0.5,
        KlKind::K3 => {
            let kl = (ref_logp - logp).clamp(-20.0, 20.0);
            let kld = kl.exp() - &kl - 1.0;
            kld.clamp(-10.0, 10.0)
        }
    }
}

/// The per-token KL estimate between `logp` and `ref_logp` (same shape), unmasked: verl's
/// `kl_penalty(logprob, ref_logprob, name)`. The actor's KL loss passes (current, ref); the
/// in-reward penalty (old, ref).
///
/// ```
/// use tch::Tensor;
/// use uniagent_train::rl::{kl_penalty, KlEstimator, KlKind};
/// let logp = Tensor::from_slice(&[-1.0f32]);
/// let reference = Tensor::from_slice(&[-2.0f32]);
/// let k2 = kl_penalty(&logp, &reference, KlEstimator::plain(KlKind::K2))?;
/// assert_eq!(k2.double_value(&[0]), 0.5);
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
pub fn kl_penalty(logp: &Tensor, ref_logp: &Tensor, estimator: KlEstimator) -> RlResult<Tensor> {
    expect_shape("ref_log_prob", ref_logp, &logp.size())?;
    let value = forward(estimator.kind, logp, ref_logp);
    if !estimator.straight_through {
        return Ok(value);
    }
    let k2 = (logp - ref_logp).square() * 0.5;
    Ok(&k2 - k2.detach() + value.detach())
}

/// Per-position entropy of the categorical distributions given by `logits` (`[..., V]`):
/// `logsumexp(z) − Σ softmax(z)·z`, verl's `entropy_from_logits`. Returns `[...]`.
///
/// ```
/// use tch::Tensor;
/// use uniagent_train::rl::entropy_from_logits;
/// let uniform = Tensor::zeros([1, 4], (tch::Kind::Float, tch::Device::Cpu));
/// let h = entropy_from_logits(&uniform)?;
/// assert!((h.double_value(&[0]) - 4f64.ln()).abs() < 1e-6);
/// # Ok::<(), uniagent_train::rl::RlError>(())
/// ```
pub fn entropy_from_logits(logits: &Tensor) -> RlResult<Tensor> {
    if logits.dim() == 0 {
        return Err(RlError::Shape {
            what: "logits",
            expected: vec![-1],
            got: vec![],
        });
    }
    let probs = logits.softmax(-1, logits.kind());
    let weighted = (probs * logits).sum_dim_intlist(-1, false, logits.kind());
    Ok(logits.logsumexp(-1, false) - weighted)
}
