//! A policy from scratch, for tiny experiments and tests: a byte-level BPE tokenizer trained
//! on your task's text with ChatML special tokens, a ChatML chat template with Hermes tool
//! calls, and a small randomly initialised Qwen2-architecture model; or all three from a
//! Hugging Face model directory.

use std::path::Path;

use tch::Device;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper,
    PreTokenizerWrapper, Tokenizer, TokenizerImpl,
};
use uniagent_core::codec::{ChatTemplate, Codec};
use uniagent_core::parsers::ToolCallFormat;
use uniagent_core::{Error, Result};

use crate::model::{ModelDtype, Qwen2Config, Qwen2ForCausalLM};

/// ChatML rendering; assistant tool calls in the Hermes format (what the policy samples).
pub const CHAT_TEMPLATE: &str = "{%- for message in messages -%}\
{{- '<|im_start|>' + message.role + '\\n' -}}\
{%- if message.role == 'assistant' -%}\
{%- if message.content -%}{{- message.content -}}{%- endif -%}\
{%- for tc in message.tool_calls or [] -%}\
{{- '<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + (tc.function.arguments | tojson) + '}\\n</tool_call>' -}}\
{%- endfor -%}\
{%- else -%}{{- message.content -}}{%- endif -%}\
{{- '<|im_end|>\\n' -}}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/// The special tokens (ids 0..4 of the trained vocabulary).
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

fn tok_error(context: &str) -> impl FnOnce(tokenizers::Error) -> Error + '_ {
    move |e| Error::Codec {
        message: format!("{context}: {e}"),
        source: None,
    }
}

/// Trains a byte-level BPE tokenizer (digits split one by one) on `corpus`.
pub fn train_tokenizer(corpus: &[String], vocab_size: usize) -> Result<Tokenizer> {
    // Merges are learned on one thread so that the same corpus gives the same tokenizer
    // (the parallel trainer's tie-breaking depends on scheduling). Process-wide setting.
    tokenizers::utils::parallelism::set_parallelism(false);
    let specials: Vec<AddedToken> = SPECIAL_TOKENS
        .iter()
        .map(|t| AddedToken::from(*t, true))
        .collect();
    let mut trainer = TrainerWrapper::BpeTrainer(
        BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(2)
            .show_progress(false)
            .special_tokens(specials)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build(),
    );
    let pre = Sequence::new(vec![
        PreTokenizerWrapper::Digits(Digits::new(true)),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
    ]);
    let mut tokenizer: TokenizerImpl<
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    > = TokenizerImpl::new(ModelWrapper::BPE(BPE::default()));
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(pre)));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
    tokenizer
        .train(&mut trainer, corpus.iter())
        .map_err(tok_error("training the tokenizer"))?;
    tokenizer
        .add_tokens([
            AddedToken::from("<tool_call>", false),
            AddedToken::from("</tool_call>", false),
        ])
        .map_err(tok_error("adding the tool-call tokens"))?;
    Ok(Tokenizer::from(tokenizer))
}

/// The codec over a trained tokenizer and [`CHAT_TEMPLATE`].
pub fn scratch_codec(tokenizer: Tokenizer) -> Result<Codec> {
    let mut globals = serde_json::Map::new();
    globals.insert("eos_token".into(), "<|im_end|>".into());
    let template = ChatTemplate::new(CHAT_TEMPLATE.to_owned(), globals.into_iter().collect())?;
    Ok(
        Codec::new(tokenizer, template, "<|im_end|>", &[])?
            .with_tool_parser(ToolCallFormat::Hermes),
    )
}

/// Writes the tokenizer and template as a Hugging Face model directory's tokenizer files.
pub fn save_tokenizer(tokenizer: &Tokenizer, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    tokenizer
        .save(dir.join("tokenizer.json"), false)
        .map_err(tok_error("saving tokenizer.json"))?;
    let config = serde_json::json!({
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    });
    let path = dir.join("tokenizer_config.json");
    std::fs::write(&path, config.to_string())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Size of the from-scratch model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TinyModel {
    /// Model width.
    pub hidden_size: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
}

impl Default for TinyModel {
    /// 64 wide, 2 layers, 4 heads (2 for keys/values), MLP 128: about 60k parameters plus
    /// the embeddings, enough for the quickstart's task family.
    fn default() -> Self {
        Self {
            hidden_size: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            intermediate_size: 128,
        }
    }
}

/// A randomly initialised tiny Qwen2 model over `vocab_size` ids.
pub fn scratch_model(size: &TinyModel, vocab_size: usize, seed: i64) -> Result<Qwen2ForCausalLM> {
    let config = Qwen2Config {
        vocab_size,
        hidden_size: size.hidden_size,
        intermediate_size: size.intermediate_size,
        num_hidden_layers: size.layers,
        num_attention_heads: size.heads,
        num_key_value_heads: Some(size.kv_heads),
        rms_norm_eps: 1e-6,
        rope_theta: Some(10_000.0),
        rope_parameters: None,
        max_position_embeddings: 1024,
        tie_word_embeddings: true,
        hidden_act: "silu".into(),
        use_sliding_window: false,
        rope_scaling: None,
        eos_token_id: None,
        bos_token_id: None,
    };
    let model = Qwen2ForCausalLM::new(config, Device::Cpu, ModelDtype::F32)?;
    model.init_random(seed);
    Ok(model)
}

/// Loads a Hugging Face model directory (tokenizer, template and weights) on `device`.
pub fn load_hf(dir: &Path, device: Device) -> Result<(Codec, Qwen2ForCausalLM)> {
    let codec = Codec::from_dir(dir)?.with_tool_parser(ToolCallFormat::Hermes);
    let model = Qwen2ForCausalLM::load(dir, device, ModelDtype::F32)?;
    Ok((codec, model))
}
