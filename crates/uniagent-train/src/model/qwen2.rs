//! [`Qwen2ForCausalLM`]: the policy network.

use std::path::Path;

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};
use uniagent_core::{Error, Result};

use super::config::Qwen2Config;
use super::layers::{rope_tables, DecoderLayer, KeyMask, LayerCache, Positions, RmsNorm};
use super::{weights, AttentionImpl, ModelDtype};

/// Keys and values of every layer for the tokens processed so far, for incremental decoding.
///
/// The cache holds all rows of a batch; [`select_rows`](Self::select_rows) drops finished rows.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<Option<LayerCache>>,
    len: i64,
}

impl KvCache {
    /// Number of cached positions (including left padding).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True before the first forward pass.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps only the given batch rows (a `[n]` int64 index tensor), in that order.
    pub fn select_rows(&mut self, rows: &Tensor) {
        for layer in self.layers.iter_mut().flatten() {
            layer.keys = layer.keys.index_select(0, rows);
            layer.values = layer.values.index_select(0, rows);
        }
    }

    /// Puts `n` positions of zeros before every row's cached positions (left padding, which
    /// the attention mask must mark as such), e.g. to line a shorter cache up with a longer one
    /// before [`append_rows`](Self::append_rows).
    pub fn pad_left(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let pad = |t: &Tensor| {
            let mut shape = t.size();
            shape[2] = n as i64;
            Tensor::cat(&[&Tensor::zeros(&shape, (t.kind(), t.device())), t], 2)
        };
        for layer in self.layers.iter_mut().flatten() {
            layer.keys = pad(&layer.keys);
            layer.values = pad(&layer.values);
        }
        self.len += n as i64;
    }

    /// Drops the first `n` cached positions of every row (padding no row attends to any more).
    pub fn drop_left(&mut self, n: usize) {
        let n = (n as i64).min(self.len);
        if n == 0 {
            return;
        }
        let keep = self.len - n;
        for layer in self.layers.iter_mut().flatten() {
            layer.keys = layer.keys.narrow(2, n, keep);
            layer.values = layer.values.narrow(2, n, keep);
        }
        self.len = keep;
    }

    /// Appends the rows of `other` after this cache's rows: a batch that new requests join.
    /// An empty cache takes `other` as it is.
    ///
    /// # Panics
    /// When the caches hold different numbers of positions (line them up with
    /// [`pad_left`](Self::pad_left)) or come from different models.
    pub fn append_rows(&mut self, other: KvCache) {
        if self.is_empty() {
            *self = other;
            return;
        }
        assert!(
            other.len == self.len && other.layers.len() == self.layers.len(),
            "joining KV caches of {} and {} positions ({} and {} layers)",
            self.len,
            other.len,
            self.layers.len(),
            other.layers.len()
        );
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            if let (Some(mine), Some(theirs)) = (mine.as_mut(), theirs) {
                mine.keys = Tensor::cat(&[&mine.keys, &theirs.keys], 0);
                mine.values = Tensor::cat(&[&mine.values, &theirs.values], 0);
            }
        }
    }
}

/// A Qwen2-architecture causal language model (RMSNorm, RoPE, grouped-query attention with
/// q/k/v biases, SwiGLU MLP, tied or untied output embeddings), with the parameter names of
/// Hugging Face checkpoints.
///
/// Norm weights and biases live in a separate [`VarStore`] group so that AdamW can skip weight
/// decay on them.
///
/// ```no_run
/// use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};
/// let model = Qwen2ForCausalLM::load("tiny-qwen2".as_ref(), tch::Device::Cpu, ModelDtype::F32)?;
/// let ids = tch::Tensor::from_slice(&[9707i64, 1879]).unsqueeze(0);
/// let logits = model.forward(&ids, None, None, None)?; // [1, 2, vocab]
/// # Ok::<(), uniagent_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Qwen2ForCausalLM {
    config: Qwen2Config,
    vs: VarStore,
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Tensor,
    dtype: ModelDtype,
    attention: AttentionImpl,
}

impl Qwen2ForCausalLM {
    /// A model with zero weights (norms at one) for `config`; fill it with
    /// [`load_weights`](Self::load_weights) or [`init_random`](Self::init_random).
    pub fn new(config: Qwen2Config, device: Device, dtype: ModelDtype) -> Result<Self> {
        config.validate()?;
        let vs = VarStore::new(device);
        let root = vs.root();
        let model = &root / "model";
        let (v, h) = (config.vocab_size as i64, config.hidden_size as i64);
        let embed_tokens = (&model / "embed_tokens").zeros("weight", &[v, h]);
        let layers = (0..config.num_hidden_layers)
            .map(|i| DecoderLayer::new(&(&model / "layers" / i), &config))
            .collect();
        let norm = RmsNorm::new(&(&model / "norm"), config.hidden_size, config.rms_norm_eps);
        let lm_head = if config.tie_word_embeddings {
            embed_tokens.shallow_clone()
        } else {
            (&root / "lm_head").zeros("weight", &[v, h])
        };
        let mut this = Self {
            config,
            vs,
            embed_tokens,
            layers,
            norm,
            lm_head,
            dtype: ModelDtype::F32,
            attention: AttentionImpl::default(),
        };
        this.set_dtype(dtype);
        Ok(this)
    }

    /// Loads `config.json` and the safetensors weights (single or sharded) of a Hugging Face
    /// checkpoint folder.
    pub fn load(dir: &Path, device: Device, dtype: ModelDtype) -> Result<Self> {
        let config = Qwen2Config::from_file(&dir.join("config.json"))?;
        let model = Self::new(config, device, dtype)?;
        model.load_weights(dir)?;
        Ok(model)
    }

    /// Replaces the weights with those of a checkpoint folder of the same shape.
    pub fn load_weights(&self, dir: &Path) -> Result<()> {
        weights::load_into(&self.vs, dir)
    }

    /// Random weights (for benchmarks and tests): embeddings N(0, 0.02), linear weights
    /// N(0, 1/fan_in), biases N(0, 0.02), norms one. Seeds libtorch's global generator and
    /// draws the parameters in name order, so that a seed always gives the same weights.
    pub fn init_random(&self, seed: i64) {
        tch::manual_seed(seed);
        let mut variables: Vec<(String, Tensor)> = self.vs.variables().into_iter().collect();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        tch::no_grad(|| {
            for (name, mut var) in variables {
                let size = var.size();
                let std = if name.ends_with("norm.weight") {
                    let _ = var.fill_(1.0);
                    continue;
                } else if size.len() == 2
                    && !name.contains("embed_tokens")
                    && !name.starts_with("lm_head")
                {
                    (1.0 / size[1] as f64).sqrt()
                } else {
                    0.02
                };
                let noise = Tensor::randn(size.as_slice(), (Kind::Float, var.device())) * std;
                var.copy_(&noise);
            }
        });
    }

    /// Writes `config.json` and `model.safetensors` so that both this type and transformers'
    /// `Qwen2ForCausalLM.from_pretrained` load them.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let config = self.config.to_hf_json(self.dtype.hf_name());
        let text = serde_json::to_string_pretty(&config)
            .map_err(|e| Error::internal(format!("serializing config.json: {e}")))?;
        let path = dir.join("config.json");
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        weights::save_from(&self.vs, dir)
    }

    /// Converts every parameter to `dtype`.
    pub fn set_dtype(&mut self, dtype: ModelDtype) {
        self.vs.set_kind(dtype.kind());
        self.dtype = dtype;
    }

    /// How attention is computed ([`AttentionImpl::Eager`] unless set).
    pub fn attention(&self) -> AttentionImpl {
        self.attention
    }

    /// Chooses how attention is computed (the weights are unchanged).
    pub fn set_attention(&mut self, attention: AttentionImpl) {
        self.attention = attention;
    }

    /// The architecture.
    pub fn config(&self) -> &Qwen2Config {
        &self.config
    }

    /// Parameter dtype.
    pub fn dtype(&self) -> ModelDtype {
        self.dtype
    }

    /// Where the parameters live.
    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// The parameters (for optimizers and checkpointing).
    pub fn var_store(&self) -> &VarStore {
        &self.vs
    }

    /// Mutable access to the parameters (freezing, copying weights in).
    pub fn var_store_mut(&mut self) -> &mut VarStore {
        &mut self.vs
    }

    /// A copy of this model (same architecture, device, dtype and attention; the same weights,
    /// in separate tensors): a frozen reference, or the generation engine's copy.
    pub fn try_clone(&self) -> Result<Self> {
        self.try_clone_to(self.device())
    }

    /// [`Self::try_clone`] onto `device` (e.g. the generation engine's GPU).
    pub fn try_clone_to(&self, device: Device) -> Result<Self> {
        let mut copy = Self::new(self.config.clone(), device, self.dtype)?;
        copy.attention = self.attention;
        copy.copy_weights_from(self)?;
        Ok(copy)
    }

    /// Copies all parameters from another model of the same architecture (no gradient).
    pub fn copy_weights_from(&mut self, other: &Qwen2ForCausalLM) -> Result<()> {
        self.vs
            .copy(&other.vs)
            .map_err(super::tch_error("copying weights"))
    }

    /// An empty cache for incremental decoding.
    pub fn new_cache(&self) -> KvCache {
        KvCache {
            layers: (0..self.layers.len()).map(|_| None).collect(),
            len: 0,
        }
    }

    /// Logits `[B, T, vocab]` (in the parameter dtype) for `input_ids` `[B, T]` (int64).
    ///
    /// - `position_ids` `[B, T]`: RoPE positions; default `past + 0..T`.
    /// - `attention_mask` `[B, past + T]`: 1/true for real tokens, 0 for padding; padding keys
    ///   are never attended to. Default: all real.
    /// - `cache`: previous keys/values, extended with this call's tokens.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        position_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let hidden = self.hidden_states(input_ids, position_ids, attention_mask, cache)?;
        Ok(self.logits(&hidden))
    }

    /// Output projection of final hidden states `[.., hidden]` -> `[.., vocab]`.
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear::<&Tensor>(&self.lm_head, None)
    }

    /// Final (normed) hidden states `[B, T, hidden]`; see [`forward`](Self::forward).
    pub fn hidden_states(
        &self,
        input_ids: &Tensor,
        position_ids: Option<&Tensor>,
        attention_mask: Option<&Tensor>,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let size = input_ids.size();
        let [b, t] = size.as_slice() else {
            return Err(Error::invalid_input(format!(
                "input_ids must be [batch, seq], got {size:?}"
            )));
        };
        let (b, t) = (*b, *t);
        if b == 0 || t == 0 {
            return Err(Error::invalid_input("input_ids must not be empty"));
        }
        let ids = input_ids.to_kind(Kind::Int64).to_device(self.device());
        let (min, max) = (ids.min().int64_value(&[]), ids.max().int64_value(&[]));
        if min < 0 || max >= self.config.vocab_size as i64 {
            return Err(Error::invalid_input(format!(
                "token ids must be in [0, {}), got [{min}, {max}]",
                self.config.vocab_size
            )));
        }
        let past = cache.as_ref().map_or(0, |c| c.len);
        let total = past + t;
        let device = self.device();
        let positions = match position_ids {
            Some(p) if p.size() != [b, t] => {
                return Err(Error::invalid_input(format!(
                    "position_ids must be [{b}, {t}], got {:?}",
                    p.size()
                )))
            }
            Some(p) => p.to_kind(Kind::Int64).to_device(device),
            None => Tensor::arange_start(past, total, (Kind::Int64, device))
                .unsqueeze(0)
                .expand([b, t], false),
        };
        let valid = match attention_mask {
            Some(m) if m.size() != [b, total] => {
                return Err(Error::invalid_input(format!(
                    "attention_mask must be [{b}, {total}] (cached + new tokens), got {:?}",
                    m.size()
                )))
            }
            Some(m) => {
                let m = m.to_device(device).to_kind(Kind::Bool);
                // An all-real mask is no mask: attention can then skip building one.
                let all_real = m.all().int64_value(&[]) != 0;
                (!all_real).then_some(m)
            }
            None => None,
        };
        let (cos, sin) = rope_tables(
            &positions,
            self.config.head_dim(),
            self.config.rope_base(),
            self.dtype.kind(),
        );
        let at = Positions {
            cos,
            sin,
            mask: KeyMask { past, valid },
            attention: self.attention,
        };
        let mut h = Tensor::embedding(&self.embed_tokens, &ids, -1, false, false);
        for (i, layer) in self.layers.iter().enumerate() {
            let slot = cache.as_mut().and_then(|c| c.layers.get_mut(i));
            h = layer.forward(&h, &at, slot);
        }
        if let Some(c) = cache {
            c.len = total;
        }
        Ok(self.norm.forward(&h))
    }
}
