//! The "repeat the word" task family the pipeline tests train on: tasks answered with the
//! `finish` tool, no sandbox, a reward that compares the answer with the task's metadata, a
//! from-scratch tokenizer and tiny Qwen2 policy.

#![allow(dead_code)] // each test binary uses its part

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use uniagent_core::agent::LoopConfig;
use uniagent_core::codec::Codec;
use uniagent_core::runner::RolloutParts;
use uniagent_core::{
    EpisodeSignal, LengthLimits, Message, Result, RewardContext, RewardOutcome, RewardSpec,
    SamplingParams, Task,
};
use uniagent_train::model::Qwen2ForCausalLM;
use uniagent_train::pipeline::{Demonstrator, RolloutSpec, StepRecord};
use uniagent_train::scratch::{scratch_codec, scratch_model, train_tokenizer, TinyModel};

pub const WORDS: [&str; 6] = ["amber", "basil", "coral", "delta", "ember", "fjord"];

/// A task asking to repeat `word`.
pub fn task(id: String, word: &str) -> Task {
    Task::new(id, vec![Message::user(format!("Repeat the word {word}."))])
        .with_metadata("word", json!(word))
}

/// `n` tasks `{prefix}-{i}` cycling through [`WORDS`].
pub fn tasks(prefix: &str, n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| task(format!("{prefix}-{i}"), WORDS[i % WORDS.len()]))
        .collect()
}

/// What a correct agent writes.
pub fn answer(word: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"finish\", \"arguments\": {{\"answer\": \"{word}\"}}}}\n</tool_call>")
}

/// 1.0 when the `finish` answer is the task's word.
#[derive(Debug)]
pub struct SameWord;

#[async_trait]
impl RewardSpec for SameWord {
    fn name(&self) -> &str {
        "same-word"
    }
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        let ok = matches!(ctx.signal, Some(EpisodeSignal::Finish { answer })
            if Some(answer.trim()) == ctx.task.metadata["word"].as_str());
        Ok(RewardOutcome::binary(ok))
    }
}

/// A tokenizer trained on the family's text, its ChatML codec and a fresh policy (`seed`).
pub fn codec_and_policy(seed: i64) -> (Arc<Codec>, Qwen2ForCausalLM) {
    tokenizers::utils::parallelism::set_parallelism(false);
    let corpus: Vec<String> = WORDS
        .iter()
        .flat_map(|w| {
            [
                format!("<|im_start|>user\nRepeat the word {w}.<|im_end|>\n"),
                format!("<|im_start|>assistant\n{}<|im_end|>\n", answer(w)),
            ]
        })
        .collect();
    let tokenizer = train_tokenizer(&corpus, 300).unwrap();
    let vocab = tokenizer.get_vocab_size(true);
    let codec = Arc::new(scratch_codec(tokenizer).unwrap());
    let policy = scratch_model(&TinyModel::default(), vocab, seed).unwrap();
    (codec, policy)
}

/// The rollout side: one turn, `finish` only, no sandbox.
pub fn spec(codec: Arc<Codec>) -> RolloutSpec {
    RolloutSpec {
        parts: RolloutParts::new(vec![Arc::new(uniagent_tools::Finish)])
            .with_reward(Arc::new(SameWord)),
        loop_config: LoopConfig {
            max_turns: 1,
            sampling: SamplingParams {
                max_tokens: Some(96),
                ..SamplingParams::default()
            },
            limits: LengthLimits {
                max_model_len: Some(512),
                ..LengthLimits::default()
            },
            create_session: false,
            ..LoopConfig::default()
        },
        codec,
        progress: None,
        environment: "word-family".into(),
    }
}

/// Demonstrations of the tasks `sft-{i}` made by [`tasks`]`("sft", n)`.
pub fn demonstrator(codec: Arc<Codec>, n: usize) -> Arc<Demonstrator> {
    let words: Vec<String> = (0..n).map(|i| WORDS[i % WORDS.len()].to_owned()).collect();
    Arc::new(Demonstrator::new(codec, move |id, turn| {
        let i: usize = id.strip_prefix("sft-")?.parse().ok()?;
        (turn == 0).then(|| answer(&words[i]))
    }))
}

/// The step records of `metrics.jsonl` in `out`.
pub fn metrics(out: &std::path::Path) -> Vec<StepRecord> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
