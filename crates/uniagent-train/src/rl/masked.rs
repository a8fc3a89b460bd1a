//! Masked reductions with verl's exact semantics (`verl/utils/torch_functional.py`).
//!
//! A mask may be boolean or numeric (0/1); anything non-zero selects. Values outside the mask
//! never contaminate a result, even when they are NaN.

use tch::{Kind, Tensor};

use super::error::{RlError, RlResult};

/// The mask as booleans.
pub(crate) fn as_bool(mask: &Tensor) -> Tensor {
    if mask.kind() == Kind::Bool {
        mask.shallow_clone()
    } else {
        mask.ne(0.0)
    }
}

/// The mask as 0/1 values of `kind`.
pub(crate) fn as_values(mask: &Tensor, kind: Kind) -> Tensor {
    as_bool(mask).to_kind(kind)
}

/// `Σ where(m, x, 0) · m` over all elements: verl's `masked_sum(values, mask)`.
///
/// ```
/// use tch::Tensor;
/// use uniagent_train::rl::masked_sum;
/// let x = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0]);
/// let m = Tensor::from_slice(&[1i64, 0, 1]);
/// assert_eq!(masked_sum(&x, &m).double_value(&[]), 4.0);
/// ```
pub fn masked_sum(values: &Tensor, mask: &Tensor) -> Tensor {
    masked_product(values, mask).sum(values.kind())
}

/// `where(m, x, 0) · m`, the masked values before a reduction.
pub(crate) fn masked_product(values: &Tensor, mask: &Tensor) -> Tensor {
    let zeros = values.zeros_like();
    values.where_self(&as_bool(mask), &zeros) * as_values(mask, values.kind())
}

/// `masked_sum(x, m) / (Σ m + 1e-8)`: verl's `masked_mean(values, mask)`.
pub fn masked_mean(values: &Tensor, mask: &Tensor) -> Tensor {
    let count = as_values(mask, values.kind()).sum(values.kind());
    masked_sum(values, mask) / (count + 1e-8)
}

/// The unbiased masked variance `masked_mean((x − μ)², m) · N/(N−1)`, `N = Σ m`:
/// verl's `masked_var(values, mask, unbiased=True)`. Errors (as verl raises) when `N ≤ 1`.
pub fn masked_var(values: &Tensor, mask: &Tensor) -> RlResult<Tensor> {
    let mean = masked_mean(values, mask);
    let centered = values - &mean;
    let variance = masked_mean(&centered.square(), mask);
    let tokens = as_bool(mask).sum(Kind::Int64).int64_value(&[]);
    if tokens <= 1 {
        return Err(RlError::TooFewTokens { tokens });
    }
    let n = tokens as f64;
    // verl divides two int64 tensors, which yields a float32 scalar.
    let bessel = Tensor::from(n as f32 / (n - 1.0) as f32).to_kind(values.kind());
    Ok(variance * bessel)
}

/// `(x − masked_mean(x, m)) · rsqrt(masked_var(x, m) + 1e-8)`: verl's `masked_whiten`, with the
/// statistics over all mask-1 elements of the batch. Errors when fewer than 2 tokens are masked in.
pub fn masked_whiten(values: &Tensor, mask: &Tensor) -> RlResult<Tensor> {
    let mean = masked_mean(values, mask);
    let var = masked_var(values, mask)?;
    Ok((values - mean) * (var + 1e-8).rsqrt())
}
