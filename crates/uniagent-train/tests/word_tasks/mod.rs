//! A task family of the tests' own, without sandboxes: "repeat the word" tasks answered with
//! the `finish` tool, a reward that compares the answer with the task's metadata, and a
//! from-scratch tokenizer and tiny Qwen2 policy trained on them.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use uniagent_core::agent::LoopConfig;
use uniagent_core::codec::Codec;
use uniagent_core::{
    EpisodeSignal, LengthLimits, Message, Result, RewardContext, RewardOutcome, RewardSpec,
    SamplingParams, Task,
};
use uniagent_train::model::Qwen2ForCausalLM;
use uniagent_train::pipeline::{Demonstrator, RolloutSpec};
use uniagent_train::scratch::{scratch_codec, scratch_model, train_tokenizer, TinyModel};

pub const WORDS: [&str; 6] = ["amber", "basil", "coral", "delta", "ember", "fjord"];

pub fn task(id: String, word: &str) -> Task {
    Task::new(id, vec![Message::user(format!("Repeat the word {word}."))])
        .with_metadata("word", json!(word))
}

/// The correct agent's turn for `word`.
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

/// The family's codec (a tokenizer trained on its dialogues), its vocabulary size, and a
/// random tiny policy over it (`seed`).
pub fn codec_and_policy(seed: i64) -> (Arc<Codec>, usize, Qwen2ForCausalLM) {
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
    (codec, vocab, policy)
}

/// One turn with the `finish` tool, no sandbox.
pub fn spec(codec: Arc<Codec>) -> RolloutSpec {
    RolloutSpec {
        tools: vec![Arc::new(uniagent_tools::Finish)],
        reward: Arc::new(SameWord),
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
        sandboxes: None,
        codec,
        progress: None,
    }
}

/// `n` tasks `{prefix}-{i}` over the words in turn.
pub fn tasks(prefix: &str, n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| task(format!("{prefix}-{i}"), WORDS[i % WORDS.len()]))
        .collect()
}

/// Demonstrations of the tasks `tasks("sft", n)` by a correct agent.
pub fn demonstrator(codec: Arc<Codec>, n: usize) -> Arc<Demonstrator> {
    let words: Vec<String> = (0..n).map(|i| WORDS[i % WORDS.len()].to_owned()).collect();
    Arc::new(Demonstrator::new(codec, move |id, turn| {
        let i: usize = id.strip_prefix("sft-")?.parse().ok()?;
        (turn == 0).then(|| answer(&words[i]))
    }))
}
