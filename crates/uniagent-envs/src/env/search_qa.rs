//! `search-qa`: question answering with the `search` tool over a local corpus (BM25), scored
//! by exact match or token F1 against the row's `golden_answers`. No sandbox is needed.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uniagent_core::Task;
use uniagent_rewards::{AnswerMatch, AnswerMetric};
use uniagent_tools::search::{Bm25Builder, Bm25Index};
use uniagent_tools::{Finish, SearchTool};

use super::{Environment, EnvironmentSettings, RolloutParts};
use crate::config::resolve;
use crate::error::{EnvError, Result};

/// Settings of `search-qa`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchQaSettings {
    /// The corpus: JSONL of `{id, title, text, url?}` documents, or a saved index (`.json`).
    pub corpus: PathBuf,
    /// `exact_match` or `f1`.
    #[serde(default)]
    pub metric: AnswerMetric,
    /// Results per query when the model does not say.
    #[serde(default = "default_top_k")]
    pub top_k: usize,
}

fn default_top_k() -> usize {
    3
}

/// The `search-qa` environment.
#[derive(Debug, Clone)]
pub struct SearchQa {
    settings: SearchQaSettings,
    index: Arc<Bm25Index>,
}

impl SearchQa {
    /// From the config section; the corpus is indexed here (a bad corpus is a config error).
    pub fn from_settings(s: &EnvironmentSettings<'_>) -> Result<Self> {
        let mut settings: SearchQaSettings = s.decode()?;
        settings.corpus = resolve(&s.base_dir(), &settings.corpus);
        let bad = |e: &dyn std::fmt::Display| {
            EnvError::preflight(format!(
                "environment.corpus {}: {e}",
                settings.corpus.display()
            ))
        };
        let index = if settings.corpus.extension().is_some_and(|e| e == "json") {
            Bm25Index::load(&settings.corpus).map_err(|e| bad(&e))?
        } else {
            let file = std::fs::File::open(&settings.corpus).map_err(|e| bad(&e))?;
            Bm25Builder::new()
                .add_jsonl(std::io::BufReader::new(file))
                .and_then(Bm25Builder::build)
                .map_err(|e| bad(&e))?
        };
        Ok(Self {
            settings,
            index: Arc::new(index),
        })
    }
}

#[async_trait]
impl Environment for SearchQa {
    fn name(&self) -> &str {
        "search-qa"
    }

    fn check_task(&self, task: &Task) -> std::result::Result<(), String> {
        match task.metadata.get("golden_answers") {
            Some(v) if v.is_array() || v.is_string() => Ok(()),
            _ => Err("missing field `golden_answers` (use the search-qa layout)".into()),
        }
    }

    fn parts(&self) -> Result<RolloutParts> {
        let mut search = SearchTool::new(Arc::clone(&self.index));
        search.default_top_k = self.settings.top_k.max(1);
        Ok(RolloutParts {
            tools: vec![Arc::new(search), Arc::new(Finish)],
            reward: Some(Arc::new(
                AnswerMatch::new(self.settings.metric).with_field("golden_answers"),
            )),
            sandboxes: None,
        })
    }
}
