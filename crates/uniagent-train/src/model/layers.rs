//! The building blocks of a Qwen2 decoder layer: RMSNorm, RoPE, grouped-query attention with
//! q/k/v biases, and the SwiGLU MLP. Each follows transformers' `modeling_qwen2` (eager
//! attention) operation by operation, so float32 results agree to rounding.

use tch::nn::Path;
use tch::{Kind, Tensor};

use super::config::Qwen2Config;

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

/// What every layer of one pass needs of the token positions: the RoPE tables (`cos`, `sin`)
/// and which keys each query may see (`allowed`: boolean `[B, 1, T, S]`, S = cached + T keys).
#[derive(Debug)]
pub(crate) struct Positions {
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    pub(crate) allowed: Tensor,
}

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
        let k = self.repeat_kv(&k);
        let v = self.repeat_kv(&v);
        let scores = q.matmul(&k.transpose(2, 3)) * (self.head_dim as f64).powf(-0.5);
        // A fully masked row (a left-pad query) gets a uniform distribution, never NaN.
        let scores = scores.masked_fill(&at.allowed.logical_not(), lowest_finite(scores.kind()));
        let probs = scores.softmax(-1, Kind::Float).to_kind(q.kind());
        let out =
            probs
                .matmul(&v)
                .transpose(1, 2)
                .contiguous()
                .view([b, t, self.heads * self.head_dim]);
        self.o_proj.forward(&out)
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
