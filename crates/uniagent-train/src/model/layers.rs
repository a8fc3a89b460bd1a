//! The building blocks of a Qwen2 decoder layer: RMSNorm, RoPE, grouped-query attention with
//! q/k/v biases, and the SwiGLU MLP. Each follows transformers' `modeling_qwen2` operation by
//! operation (attention either as its eager path or through libtorch's
//! `scaled_dot_product_attention`, as its `sdpa` path), so float32 results agree to rounding.

use tch::nn::Path;
use tch::{Device, Kind, Tensor};

use super::config::Qwen2Config;
use super::AttentionImpl;

/// `y = x W^T (+ b)`.
#[derive(Debug)]
pub(crate) struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
}

impl Linear {
    pub(crate) fn new(path: &Path<'_>, in_dim: usize, out_dim: usize, bias: bool) -> Self {
        let weight = path.zeros("weight", &[out_dim as i64, in_dim as i64]);
        let bias = bias.then(|| path.zeros("bias", &[out_dim as i64]));
        Self { weight, bias }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// Root-mean-square norm computed in float32, as transformers' `Qwen2RMSNorm`.
#[derive(Debug)]
pub(crate) struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub(crate) fn new(path: &Path<'_>, dim: usize, eps: f64) -> Self {
        Self {
            weight: path.ones("weight", &[dim as i64]),
            eps,
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        let h = x.to_kind(Kind::Float);
        let variance = h.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float);
        let h = h * (variance + self.eps).rsqrt();
        &self.weight * h.to_kind(kind)
    }
}

/// Rotary embedding tables for given positions: `(cos, sin)`, each `[B, 1, T, head_dim]`.
///
/// `inv_freq[i] = 1 / theta^(2i/d)` in float32; the angle is `position * inv_freq`, and the
/// second half of the head repeats the first (the "half-split" layout of transformers).
pub(crate) fn rope_tables(
    position_ids: &Tensor,
    head_dim: usize,
    theta: f64,
    kind: Kind,
) -> (Tensor, Tensor) {
    let device = position_ids.device();
    let exponents = Tensor::arange_start_step(0, head_dim as i64, 2, (Kind::Int64, device))
        .to_kind(Kind::Float)
        / head_dim as f64;
    let base = Tensor::from(theta as f32).to_device(device);
    let inv_freq = base.pow(&exponents).reciprocal();
    let freqs = position_ids.to_kind(Kind::Float).unsqueeze(-1) * inv_freq;
    let emb = Tensor::cat(&[&freqs, &freqs], -1);
    (
        emb.cos().to_kind(kind).unsqueeze(1),
        emb.sin().to_kind(kind).unsqueeze(1),
    )
}

/// The most negative finite value of a floating kind (what transformers fills masked scores
/// with).
fn lowest_finite(kind: Kind) -> f64 {
    match kind {
        Kind::BFloat16 => -3.389_531_389_251_535_5e38,
        Kind::Half => -65_504.0,
        Kind::Double => f64::MIN,
        _ => f64::from(f32::MIN),
    }
}

fn rotate_half(x: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let x1 = x.narrow(3, 0, half);
    let x2 = x.narrow(3, half, half);
    Tensor::cat(&[&x2.neg(), &x1], 3)
}

fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    x * cos + rotate_half(x) * sin
}

/// Keys and values of one layer for the tokens seen so far: `[B, kv_heads, S, head_dim]`.
#[derive(Debug)]
pub(crate) struct LayerCache {
    pub(crate) keys: Tensor,
    pub(crate) values: Tensor,
}

/// One layer's slot in a KV cache (`None`: no cache, the pass keeps nothing); the slot itself
/// is `None` until the layer's first pass fills it.
pub(crate) type CacheSlot<'a> = Option<&'a mut Option<LayerCache>>;

/// Which keys each query of a pass may see: key `j` is visible to query `i` (absolute
/// position `past + i`) when `j <= past + i` and key `j` is real (not padding).
///
/// The `[T, S]` grid itself is built only where an attention needs it, and only for the
/// queries it asks for, so that memory-efficient attention never holds it whole.
#[derive(Debug)]
pub(crate) struct KeyMask {
    /// Keys cached before this pass: query `i` sits at key position `past + i`.
    pub(crate) past: i64,
    /// Real keys, boolean `[B, S]` (S = past + T); `None` when every key is real.
    pub(crate) valid: Option<Tensor>,
}

impl KeyMask {
    /// `allowed[b, 0, i, j]` (boolean `[B or 1, 1, len, keys]`): may query `first + i` see
    /// key `j`, for the `len` queries from `first` and the first `keys` keys.
    pub(crate) fn allowed(&self, first: i64, len: i64, keys: i64, device: Device) -> Tensor {
        let start = self.past + first;
        let query_pos =
            Tensor::arange_start(start, start + len, (Kind::Int64, device)).unsqueeze(1);
        let key_pos = Tensor::arange(keys, (Kind::Int64, device)).unsqueeze(0);
        let causal = key_pos.le_tensor(&query_pos).unsqueeze(0);
        match &self.valid {
            Some(valid) => causal
                .logical_and(&valid.narrow(1, 0, keys).unsqueeze(1))
                .unsqueeze(1),
            None => causal.unsqueeze(1),
        }
    }
}

/// What every layer of one pass needs of the token positions: the RoPE tables (`cos`, `sin`),
/// which keys each query may see, and how attention is computed.
#[derive(Debug)]
pub(crate) struct Positions {
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    pub(crate) mask: KeyMask,
    pub(crate) attention: AttentionImpl,
}

/// Most elements (batch x heads x queries x keys) one attention call of
/// [`AttentionImpl::Sdpa`] may span when it needs an explicit mask: the queries go through in
/// chunks of at most this many scores (128 MiB in float32), whatever kernel libtorch picks.
const SDPA_CHUNK_ELEMENTS: i64 = 1 << 25;

/// Grouped-query self-attention with q/k/v biases and no output bias.
#[derive(Debug)]
pub(crate) struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    pub(crate) fn new(path: &Path<'_>, config: &Qwen2Config) -> Self {
        let h = config.hidden_size;
        let d = config.head_dim();
        let heads = config.num_attention_heads;
        let kv = config.kv_heads();
        Self {
            q_proj: Linear::new(&(path / "q_proj"), h, heads * d, true),
            k_proj: Linear::new(&(path / "k_proj"), h, kv * d, true),
            v_proj: Linear::new(&(path / "v_proj"), h, kv * d, true),
            o_proj: Linear::new(&(path / "o_proj"), heads * d, h, false),
            heads: heads as i64,
            kv_heads: kv as i64,
            head_dim: d as i64,
        }
    }

    /// `x`: `[B, T, hidden]`; `cache`: this layer's keys/values so far, extended in place.
    pub(crate) fn forward(&self, x: &Tensor, at: &Positions, cache: CacheSlot<'_>) -> Tensor {
        let (b, t) = (x.size()[0], x.size()[1]);
        let shape = |y: Tensor, n: i64| y.view([b, t, n, self.head_dim]).transpose(1, 2);
        let q = shape(self.q_proj.forward(x), self.heads);
        let k = shape(self.k_proj.forward(x), self.kv_heads);
        let v = shape(self.v_proj.forward(x), self.kv_heads);
        let q = apply_rope(&q, &at.cos, &at.sin);
        let k = apply_rope(&k, &at.cos, &at.sin);
        let (k, v) = match cache {
            Some(slot) => {
                let (k, v) = match slot.take() {
                    Some(old) => (
                        Tensor::cat(&[&old.keys, &k], 2),
                        Tensor::cat(&[&old.values, &v], 2),
                    ),
                    None => (k, v),
                };
                *slot = Some(LayerCache {
                    keys: k.shallow_clone(),
                    values: v.shallow_clone(),
                });
                (k, v)
            }
            None => (k, v),
        };
        let out = match at.attention {
            AttentionImpl::Eager => self.eager(&q, &k, &v, &at.mask),
            AttentionImpl::Sdpa => self.sdpa(&q, &k, &v, &at.mask),
        };
        let out = out
            .transpose(1, 2)
            .contiguous()
            .view([b, t, self.heads * self.head_dim]);
        self.o_proj.forward(&out)
    }

    fn scale(&self) -> f64 {
        (self.head_dim as f64).powf(-0.5)
    }

    /// `q` `[B, heads, T, d]` attending to the keys and values so far (`[B, kv_heads, S, d]`):
    /// `[B, heads, T, d]`.
    fn eager(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: &KeyMask) -> Tensor {
        let allowed = mask.allowed(0, q.size()[2], k.size()[2], q.device());
        eager_attention(
            q,
            &self.repeat_kv(k),
            &self.repeat_kv(v),
            &allowed,
            self.scale(),
        )
    }

    /// As [`eager`](Self::eager), through [`sdpa_attention`].
    fn sdpa(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: &KeyMask) -> Tensor {
        let (b, s) = (q.size()[0], k.size()[2]);
        let chunk = SDPA_CHUNK_ELEMENTS / (b * self.heads * s).max(1);
        let (k, v) = (self.repeat_kv(k), self.repeat_kv(v));
        sdpa_attention(q, &k, &v, mask, self.scale(), chunk)
    }

    /// `[B, kv, S, d]` -> `[B, heads, S, d]`, each kv head serving `heads / kv` consecutive
    /// query heads.
    fn repeat_kv(&self, x: &Tensor) -> Tensor {
        let n_rep = self.heads / self.kv_heads;
        if n_rep == 1 {
            return x.shallow_clone();
        }
        let s = x.size();
        x.unsqueeze(2)
            .expand([s[0], s[1], n_rep, s[2], s[3]], false)
            .reshape([s[0], self.heads, s[2], s[3]])
    }
}

/// `softmax(q k^T * scale, masked) v` with the `[B, heads, T, S]` scores materialised,
/// operation by operation as transformers' eager attention (`q` `[B, heads, T, d]`, `k` and `v`
/// `[B, heads, S, d]`, `allowed` boolean and broadcastable to `[B, heads, T, S]`).
fn eager_attention(q: &Tensor, k: &Tensor, v: &Tensor, allowed: &Tensor, scale: f64) -> Tensor {
    let scores = q.matmul(&k.transpose(2, 3)) * scale;
    // A fully masked row (a left-pad query) gets a uniform distribution, never NaN.
    let scores = scores.masked_fill(&allowed.logical_not(), lowest_finite(scores.kind()));
    let probs = scores.softmax(-1, Kind::Float).to_kind(q.kind());
    probs.matmul(v)
}

/// The attention of [`eager_attention`] through libtorch's `scaled_dot_product_attention`
/// (`k` and `v` with as many heads as `q`).
///
/// A causal pass over unpadded keys (a prefill, or one new token per row) takes no mask and
/// lets libtorch pick its fused kernel, which never holds the `[T, S]` scores. Padded or partly
/// cached passes add an explicit mask (0 where allowed, the lowest finite value elsewhere, as
/// the eager path fills masked scores), `chunk` queries at a time (at least one), each chunk
/// against only the keys it can see: memory stays bounded by the chunk even where the kernel
/// materialises scores. Real queries get the eager numerics up to rounding; a fully masked
/// query (left padding) averages the values of the keys up to its chunk's last query instead
/// of all keys, an output no real position ever reads.
fn sdpa_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &KeyMask,
    scale: f64,
    chunk: i64,
) -> Tensor {
    let size = q.size();
    let (t, s) = (size[2], k.size()[2]);
    if mask.valid.is_none() && (mask.past == 0 || t == 1) {
        // A prefill (S == T, causal) or one new token per row (sees every key).
        return Tensor::scaled_dot_product_attention::<Tensor>(
            q,
            k,
            v,
            None,
            0.0,
            t > 1,
            scale,
            false,
        );
    }
    let chunk = chunk.clamp(1, t);
    let lowest = lowest_finite(q.kind());
    // Each chunk's output goes straight into one preallocated tensor: chunk outputs kept until
    // a final `cat` would sit between the chunks' large temporaries and fragment the heap (the
    // resident set then grew with the prompt almost as if the scores were materialised).
    let out = Tensor::zeros(size.as_slice(), (q.kind(), q.device()));
    for first in (0..t).step_by(chunk as usize) {
        let len = chunk.min(t - first);
        // Keys past the chunk's last query are never visible to it.
        let keys = (mask.past + first + len).min(s);
        let allowed = mask.allowed(first, len, keys, q.device());
        let bias = Tensor::zeros(allowed.size(), (q.kind(), q.device()))
            .masked_fill(&allowed.logical_not(), lowest);
        let piece = Tensor::scaled_dot_product_attention(
            &q.narrow(2, first, len),
            &k.narrow(2, 0, keys),
            &v.narrow(2, 0, keys),
            Some(&bias),
            0.0,
            false,
            scale,
            false,
        );
        out.narrow(2, first, len).copy_(&piece);
    }
    out
}

/// `down(silu(gate(x)) * up(x))`.
#[derive(Debug)]
pub(crate) struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    pub(crate) fn new(path: &Path<'_>, config: &Qwen2Config) -> Self {
        let (h, i) = (config.hidden_size, config.intermediate_size);
        Self {
            gate_proj: Linear::new(&(path / "gate_proj"), h, i, false),
            up_proj: Linear::new(&(path / "up_proj"), h, i, false),
            down_proj: Linear::new(&(path / "down_proj"), i, h, false),
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        self.down_proj
            .forward(&(self.gate_proj.forward(x).silu() * self.up_proj.forward(x)))
    }
}

/// One pre-norm decoder layer.
#[derive(Debug)]
pub(crate) struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    pub(crate) fn new(path: &Path<'_>, config: &Qwen2Config) -> Self {
        let eps = config.rms_norm_eps;
        Self {
            input_layernorm: RmsNorm::new(&(path / "input_layernorm"), config.hidden_size, eps),
            self_attn: Attention::new(&(path / "self_attn"), config),
            post_attention_layernorm: RmsNorm::new(
                &(path / "post_attention_layernorm"),
                config.hidden_size,
                eps,
            ),
            mlp: Mlp::new(&(path / "mlp"), config),
        }
    }

    pub(crate) fn forward(&self, x: &Tensor, at: &Positions, cache: CacheSlot<'_>) -> Tensor {
        let h = x + self
            .self_attn
            .forward(&self.input_layernorm.forward(x), at, cache);
        &h + self.mlp.forward(&self.post_attention_layernorm.forward(&h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE: f64 = 0.35;

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    /// `q` `[B, H, T, d]`, `k` and `v` `[B, H, S, d]`, normal entries.
    fn qkv(b: i64, t: i64, s: i64, grad: bool) -> (Tensor, Tensor, Tensor) {
        let opts = (Kind::Float, Device::Cpu);
        let draw = |n: i64| Tensor::randn([b, 3, n, 8], opts).set_requires_grad(grad);
        (draw(t), draw(s), draw(s))
    }

    #[test]
    fn sdpa_matches_eager_on_a_causal_prefill() {
        tch::manual_seed(1);
        let (q, k, v) = qkv(2, 9, 9, false);
        let mask = KeyMask {
            past: 0,
            valid: None,
        };
        let eager = eager_attention(&q, &k, &v, &mask.allowed(0, 9, 9, Device::Cpu), SCALE);
        let sdpa = sdpa_attention(&q, &k, &v, &mask, SCALE, i64::MAX);
        assert!(max_diff(&eager, &sdpa) < 1e-6);
    }

    #[test]
    fn one_cached_step_sees_every_key() {
        tch::manual_seed(2);
        let (q, k, v) = qkv(2, 1, 7, false);
        let mask = KeyMask {
            past: 6,
            valid: None,
        };
        let eager = eager_attention(&q, &k, &v, &mask.allowed(0, 1, 7, Device::Cpu), SCALE);
        let sdpa = sdpa_attention(&q, &k, &v, &mask, SCALE, i64::MAX);
        assert!(max_diff(&eager, &sdpa) < 1e-6);
    }

    /// Two rows after 3 cached positions, 5 new queries: row 1's first 4 keys are padding, so
    /// its first query sees nothing (left padding) and is left out of the comparison.
    #[test]
    fn chunked_sdpa_matches_eager_with_padding_and_a_cache() {
        tch::manual_seed(3);
        let (past, t) = (3, 5);
        let s = past + t;
        let valid = Tensor::from_slice2(&[
            [true; 8],
            [false, false, false, false, true, true, true, true],
        ]);
        let mask = KeyMask {
            past,
            valid: Some(valid),
        };
        let (q, k, v) = qkv(2, t, s, false);
        let eager = eager_attention(&q, &k, &v, &mask.allowed(0, t, s, Device::Cpu), SCALE);
        for chunk in [0, 1, 2, 3, 5, i64::MAX] {
            let sdpa = sdpa_attention(&q, &k, &v, &mask, SCALE, chunk);
            assert_eq!(sdpa.isnan().sum(Kind::Int64).int64_value(&[]), 0);
            let row0 = max_diff(&eager.get(0), &sdpa.get(0));
            let row1 = max_diff(
                &eager.get(1).narrow(1, 1, t - 1),
                &sdpa.get(1).narrow(1, 1, t - 1),
            );
            assert!(row0 < 1e-6 && row1 < 1e-6, "chunk {chunk}: {row0}, {row1}");
        }
    }

    /// Right padding, as the trainer's batches: the gradients through chunked SDPA are the
    /// eager ones.
    #[test]
    fn chunked_sdpa_gradients_match_eager() {
        tch::manual_seed(4);
        let t = 6;
        let valid = Tensor::from_slice2(&[[true; 6], [true, true, true, true, false, false]]);
        let mask = KeyMask {
            past: 0,
            valid: Some(valid),
        };
        let (q, k, v) = qkv(2, t, t, true);
        let weights = Tensor::randn([2, 3, t, 8], (Kind::Float, Device::Cpu));
        let grads = |out: Tensor| {
            (out * &weights).sum(Kind::Float).backward();
            let g: Vec<Tensor> = [&q, &k, &v].iter().map(|x| x.grad().copy()).collect();
            for x in [&q, &k, &v] {
                let _ = x.grad().zero_();
            }
            g
        };
        let eager = grads(eager_attention(
            &q,
            &k,
            &v,
            &mask.allowed(0, t, t, Device::Cpu),
            SCALE,
        ));
        let sdpa = grads(sdpa_attention(&q, &k, &v, &mask, SCALE, 4));
        for (e, s) in eager.iter().zip(&sdpa) {
            assert!(max_diff(e, s) < 1e-5, "{}", max_diff(e, s));
        }
    }
}
