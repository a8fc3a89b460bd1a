//! The one configuration schema of `run` and `train`: `tasks`, `environment`, `model`, `loop`,
//! `runner`, `output`, and `trainer` (kept verbatim for the training pipeline's own type).
//!
//! Every section rejects unknown keys. Errors name the file, the line and the key path; a
//! value set with `--set KEY=VALUE` is blamed on that override instead.

mod rollout;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_core::agent::LoopConfig;
use uniagent_core::runner::RunnerConfig;

pub use rollout::{harness_gateway, RolloutSection};
pub use uniagent_envs::config::{line_of, resolve, ConfigDoc, Override};

use crate::dataset::TasksConfig;
use crate::error::Result;
use crate::model::ModelConfig;

/// The whole configuration of a `run` (and, with `trainer`, of a `train`).
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    /// The dataset: where the tasks come from and how rows become prompts.
    pub tasks: TasksConfig,
    /// The environment section as written: `type` picks a registered environment, the other
    /// keys are that environment's settings.
    pub environment: Value,
    /// The model.
    pub model: ModelConfig,
    /// The interaction loop: budgets, limits, sampling, masking policy.
    #[serde(rename = "loop")]
    pub loop_config: LoopConfig,
    /// Concurrency and samples per task.
    pub runner: RunnerConfig,
    /// Where results go.
    pub output: OutputConfig,
    /// The training pipeline's configuration (read by `train`), kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trainer: Option<Value>,
}

/// The top-level keys; anything else is a typo.
const SECTIONS: [&str; 7] = [
    "tasks",
    "environment",
    "model",
    "loop",
    "runner",
    "output",
    "trainer",
];

/// Where a run writes its results.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// The output directory (`--out` overrides it), relative to the working directory.
    /// Default: `runs/<config file stem>`.
    pub dir: Option<PathBuf>,
    /// Also record every rollout as a cassette in `cassettes.jsonl` (one line each, next to
    /// `trajectories.jsonl`) for `uniagent replay`. Needs a token-level model.
    pub cassettes: bool,
    /// Serve Prometheus metrics on `GET /metrics` at `HOST:PORT` while the command runs
    /// (`--metrics-addr` overrides it; port 0 picks a free one).
    pub metrics_addr: Option<String>,
    /// How long the metrics endpoint serves on after the work ends, for a last scrape, in
    /// seconds (`--metrics-linger` overrides it). Default 0.
    #[serde(with = "uniagent_core::duration_secs")]
    pub metrics_linger: Duration,
}

impl RunConfig {
    /// Decodes every section of `doc`; relative dataset and model paths are resolved against
    /// the config file's directory.
    pub fn from_doc(doc: &ConfigDoc) -> Result<Self> {
        let root = doc.value();
        if let Some(map) = root.as_object() {
            for key in map.keys() {
                if !SECTIONS.contains(&key.as_str()) {
                    return Err(doc.error_at(
                        std::slice::from_ref(key),
                        format!("unknown section, expected one of {}", SECTIONS.join(", ")),
                    ));
                }
            }
        }
        let section = |name: &str| root.get(name).cloned().unwrap_or(Value::Null);
        let or_default = |v: Value| {
            if v.is_null() {
                Value::Object(Default::default())
            } else {
                v
            }
        };
        let required = |name: &str| {
            let v = section(name);
            if v.is_null() {
                Err(doc.error_at(&[name.to_owned()], "missing section"))
            } else {
                Ok(v)
            }
        };
        let mut tasks: TasksConfig = doc.decode(&["tasks"], &or_default(section("tasks")))?;
        let environment = required("environment")?;
        if environment.get("type").and_then(Value::as_str).is_none() {
            return Err(doc.error_at(
                &["environment".into(), "type".into()],
                "missing: name the environment (file-lookup, command, search-qa, swe, or a registered one)",
            ));
        }
        let mut model: ModelConfig = doc.decode(&["model"], &required("model")?)?;
        let loop_config: LoopConfig = doc.decode(&["loop"], &or_default(section("loop")))?;
        let runner: RunnerConfig = doc.decode(&["runner"], &or_default(section("runner")))?;
        let output: OutputConfig = doc.decode(&["output"], &or_default(section("output")))?;
        let trainer = root.get("trainer").cloned();

        let base = doc.base_dir();
        tasks.resolve_paths(&base);
        model.resolve_paths(&base);
        loop_config
            .validate()
            .map_err(|e| doc.error_at(&["loop".into()], e))?;
        runner
            .validate()
            .map_err(|e| doc.error_at(&["runner".into()], e))?;
        Ok(Self {
            tasks,
            environment,
            model,
            loop_config,
            runner,
            output,
            trainer,
        })
    }

    /// The environment's registered name.
    pub fn environment_type(&self) -> &str {
        self.environment
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}
