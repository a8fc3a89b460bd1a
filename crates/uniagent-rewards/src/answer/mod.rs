//! [`AnswerMatch`]: search-QA rewards comparing the `finish` answer with the gold answers.

mod normalize;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uniagent_core::{EpisodeSignal, Result, RewardContext, RewardOutcome, RewardSpec};

pub use normalize::{exact_match, normalize_answer, token_f1};

use crate::error::RewardError;

/// Which score [`AnswerMatch`] trains on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerMetric {
    /// 1.0 when the normalised answer equals a normalised gold answer, else 0.0.
    #[default]
    ExactMatch,
    /// The best token F1 against the gold answers (partial credit).
    F1,
}

/// Scores the agent's `finish` answer against the task's gold answers with SQuAD semantics.
///
/// The gold answers are read from the task metadata field [`AnswerMatch::field`] (default
/// `answer`): a string, a number, or a list of them (any one may match). An episode that did not
/// end with `finish` scores 0. The outcome's details hold `expected`, `given`, `exact_match` and
/// `f1`; `success` is the exact match whatever the metric.
///
/// ```
/// use serde_json::json;
/// use uniagent_core::{EpisodeSignal, Message, RewardContext, RewardSpec, Task};
/// use uniagent_rewards::answer::{AnswerMatch, AnswerMetric};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let task = Task::new("q1", vec![Message::user("Who wrote Hamlet?")])
///     .with_metadata("answer", json!(["William Shakespeare", "Shakespeare"]));
/// let signal = EpisodeSignal::Finish { answer: "shakespeare.".into() };
/// let ctx = RewardContext { task: &task, messages: &[], signal: Some(&signal), deployment: None };
/// let outcome = AnswerMatch::new(AnswerMetric::ExactMatch).score(&ctx).await.unwrap();
/// assert!(outcome.success);
/// assert_eq!(outcome.score, 1.0);
/// # });
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnswerMatch {
    /// The score used for training.
    pub metric: AnswerMetric,
    /// The metadata field holding the gold answer(s).
    pub field: String,
}

impl Default for AnswerMatch {
    fn default() -> Self {
        Self::new(AnswerMetric::ExactMatch)
    }
}

impl AnswerMatch {
    /// Reads gold answers from the `answer` field.
    pub fn new(metric: AnswerMetric) -> Self {
        Self {
            metric,
            field: "answer".into(),
        }
    }

    /// Reads gold answers from `field` instead.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = field.into();
        self
    }

    fn gold(&self, ctx: &RewardContext<'_>) -> std::result::Result<Vec<String>, RewardError> {
        let value =
            ctx.task
                .metadata
                .get(&self.field)
                .ok_or_else(|| RewardError::MissingMetadata {
                    field: self.field.clone(),
                })?;
        let malformed = |message: &str| RewardError::BadMetadata {
            field: self.field.clone(),
            message: message.into(),
        };
        let one = |v: &Value| match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            _ => Err(malformed("answers must be strings or numbers")),
        };
        let gold = match value {
            Value::Array(items) => items
                .iter()
                .map(one)
                .collect::<std::result::Result<_, _>>()?,
            other => vec![one(other)?],
        };
        if gold.is_empty() {
            return Err(malformed("the list of answers is empty"));
        }
        Ok(gold)
    }
}

#[async_trait]
impl RewardSpec for AnswerMatch {
    fn name(&self) -> &str {
        match self.metric {
            AnswerMetric::ExactMatch => "answer_exact_match",
            AnswerMetric::F1 => "answer_f1",
        }
    }

    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        let gold = self.gold(ctx).map_err(|e| e.into_core(self.name()))?;
        let Some(EpisodeSignal::Finish { answer }) = ctx.signal else {
            return Ok(RewardOutcome::binary(false)
                .with_detail("expected", json!(gold))
                .with_detail("reason", json!("the episode did not end with `finish`")));
        };
        let em = gold.iter().any(|g| exact_match(answer, g));
        let f1 = gold
            .iter()
            .map(|g| token_f1(answer, g))
            .fold(0.0_f64, f64::max);
        let score = match self.metric {
            AnswerMetric::ExactMatch => f64::from(u8::from(em)),
            AnswerMetric::F1 => f1,
        };
        Ok(RewardOutcome {
            score,
            success: em,
            details: Default::default(),
        }
        .with_detail("expected", json!(gold))
        .with_detail("given", json!(answer))
        .with_detail("exact_match", json!(em))
        .with_detail("f1", json!(f1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uniagent_core::{ErrorKind, Message, Task};

    fn task(answer: Value) -> Task {
        Task::new("t", vec![Message::user("q")]).with_metadata("answer", answer)
    }

    async fn score(
        reward: &AnswerMatch,
        task: &Task,
        signal: Option<EpisodeSignal>,
    ) -> Result<RewardOutcome> {
        let ctx = RewardContext {
            task,
            messages: &[],
            signal: signal.as_ref(),
            deployment: None,
        };
        reward.score(&ctx).await
    }

    fn finish(answer: &str) -> Option<EpisodeSignal> {
        Some(EpisodeSignal::Finish {
            answer: answer.into(),
        })
    }

    #[tokio::test]
    async fn f1_gives_partial_credit_and_success_stays_exact() {
        let reward = AnswerMatch::new(AnswerMetric::F1);
        let t = task(json!("Santa Clara"));
        let out = score(&reward, &t, finish("Santa Clara, California"))
            .await
            .unwrap();
        assert!((out.score - 0.8).abs() < 1e-12, "{out:?}");
        assert!(!out.success);
        assert_eq!(out.details["exact_match"], json!(false));
        let out = score(&reward, &t, finish("the santa clara")).await.unwrap();
        assert_eq!((out.score, out.success), (1.0, true));
    }

    #[tokio::test]
    async fn the_best_of_several_gold_answers_counts() {
        let reward = AnswerMatch::new(AnswerMetric::F1);
        let t = task(json!(["New York City", 1984]));
        assert_eq!(score(&reward, &t, finish("1984")).await.unwrap().score, 1.0);
        let partial = score(&reward, &t, finish("New York")).await.unwrap().score;
        assert!((partial - 0.8).abs() < 1e-12, "{partial}");
    }

    #[tokio::test]
    async fn no_finish_scores_zero_and_says_why() {
        let reward = AnswerMatch::default();
        let t = task(json!("x"));
        let submit = Some(EpisodeSignal::Submit { patch: "x".into() });
        for signal in [None, submit] {
            let out = score(&reward, &t, signal).await.unwrap();
            assert_eq!((out.score, out.success), (0.0, false));
            assert!(out.details["reason"].as_str().unwrap().contains("finish"));
        }
    }

    #[tokio::test]
    async fn missing_or_malformed_gold_is_a_typed_error() {
        let reward = AnswerMatch::default().with_field("gold");
        let err = score(&reward, &task(json!("x")), finish("x"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(err.to_string().contains("no `gold`"), "{err}");
        let reward = AnswerMatch::default();
        for bad in [json!([]), json!({"a": 1}), json!([true])] {
            let err = score(&reward, &task(bad.clone()), finish("x"))
                .await
                .unwrap_err();
            assert!(err.to_string().contains("malformed"), "{bad}: {err}");
        }
    }
}
