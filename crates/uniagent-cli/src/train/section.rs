//! The `trainer:` section: the training pipeline's own [`PipelineConfig`] (read verbatim, its
//! keys at the top of the section) plus four keys of the command itself — `quick`, `split`,
//! `scratch` and `rollout`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_train::pipeline::PipelineConfig;
use uniagent_train::scratch::TinyModel;

pub(super) use crate::config::RolloutSection;
use crate::config::{ConfigDoc, RunConfig};
use crate::error::Result;
use crate::model::ModelConfig;

/// Which of the run's tasks serve which phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Split {
    /// The first `sft_tasks` tasks are demonstrated (the environment's
    /// `demonstration`) for the SFT warm start; 0: no SFT.
    pub sft_tasks: usize,
    /// The last `eval_tasks` tasks are held out: evaluated greedily before RL, every
    /// `rl.eval_every` steps and at the end, never trained on.
    pub eval_tasks: usize,
}

/// The from-scratch policy used when `model.dir` is not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scratch {
    /// Vocabulary of the byte-level BPE tokenizer trained on the environment's corpus.
    pub vocab_size: usize,
    /// Size of the Qwen2-architecture model, initialised from `seed`.
    pub model: TinyModel,
}

impl Default for Scratch {
    fn default() -> Self {
        Self {
            vocab_size: 400,
            model: TinyModel {
                hidden_size: 64,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                intermediate_size: 128,
            },
        }
    }
}

/// The decoded `trainer:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerSection {
    /// The CI-sized run: 12 RL steps, held-out evaluation every 6 (the warm start and the
    /// held-out tasks unchanged).
    pub quick: bool,
    /// Which tasks are demonstrated and which are held out.
    pub split: Split,
    /// The policy trained from scratch when `model.dir` is unset.
    pub scratch: Scratch,
    /// Where the rollouts come from.
    pub rollout: RolloutSection,
    /// The pipeline: seed, `sft`, `rl` (mode, loss, async knobs, rollout correction), engine.
    pub pipeline: PipelineConfig,
}

impl TrainerSection {
    /// Decodes `trainer:` of `doc` (errors name `trainer.<key>` and its line). Pipeline keys
    /// left out take the run's values where the run has one: `max_concurrent_rollouts`
    /// from `runner.max_concurrent_rollouts`, `rl.group_size` from `runner.samples_per_task`.
    pub fn from_doc(doc: &ConfigDoc, run: &RunConfig) -> Result<Self> {
        let prefix = ["trainer".to_owned()];
        let Some(value) = run.trainer.clone() else {
            return Err(doc.error_at(
                &prefix,
                "missing section: `train` needs a `trainer:` section (without it, use `uniagent run`)",
            ));
        };
        if !matches!(run.model, ModelConfig::Tch(_)) {
            return Err(doc.error_at(
                &["model".into(), "type".into()],
                format!(
                    "`train` trains a local policy: set model.type to `tch` (it is `{}`)",
                    run.model.backend()
                ),
            ));
        }
        let Value::Object(mut map) = value else {
            return Err(doc.error_at(&prefix, "must be a mapping"));
        };
        let mut take = |key: &str| map.remove(key).unwrap_or(Value::Null);
        let (quick, split, scratch) = (take("quick"), take("split"), take("scratch"));
        let rollout = take("rollout");
        let quick: bool = decode_or_default(doc, "quick", quick)?;
        let split: Split = decode_or_default(doc, "split", split)?;
        let scratch: Scratch = decode_or_default(doc, "scratch", scratch)?;
        let rollout = RolloutSection::decode(doc, rollout)?;
        let has_concurrency = map.contains_key("max_concurrent_rollouts");
        let has_group = map
            .get("rl")
            .and_then(Value::as_object)
            .is_some_and(|rl| rl.contains_key("group_size"));
        let mut pipeline: PipelineConfig = doc.decode(&["trainer"], &Value::Object(map))?;
        if !has_concurrency {
            pipeline.max_concurrent_rollouts = run.runner.max_concurrent_rollouts;
        }
        if !has_group {
            pipeline.rl.group_size = run.runner.samples_per_task;
        }
        if quick {
            pipeline.rl.steps = 12;
            pipeline.rl.eval_every = 6;
        }
        pipeline
            .validate()
            .map_err(|e| doc.error_at(&prefix, e.to_string()))?;
        if scratch.vocab_size < 300 {
            return Err(doc.error_at(
                &["trainer".into(), "scratch".into(), "vocab_size".into()],
                "must be at least 300 (256 byte tokens plus merges and specials)",
            ));
        }
        Ok(Self {
            quick,
            split,
            scratch,
            rollout,
            pipeline,
        })
    }
}

fn decode_or_default<T: serde::de::DeserializeOwned + Default>(
    doc: &ConfigDoc,
    key: &str,
    value: Value,
) -> Result<T> {
    if value.is_null() {
        return Ok(T::default());
    }
    doc.decode(&["trainer", key], &value)
}
