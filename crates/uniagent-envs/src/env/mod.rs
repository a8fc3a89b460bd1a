//! Environments pair a task with its sandbox, tools and reward.
//!
//! An [`Environment`] produces exactly the pieces a runner is assembled from — its
//! [`RolloutParts`] (tools, reward, a sandbox factory) and adjustments of the [`LoopConfig`] —
//! so the same environment serves `run`, `serve` and the training pipeline's rollouts. Environments are found by
//! the config's `environment.type` in an [`EnvironmentRegistry`]; the built-ins are
//! `file-lookup`, `command`, `search-qa`, `swe` and `harbor`, and users register their own.
//!
//! # Adding an environment
//!
//! ```
//! use std::sync::Arc;
//! use serde::Deserialize;
//! use uniagent_envs::{Environment, EnvironmentRegistry, EnvironmentSettings, RolloutParts};
//! use uniagent_core::{EpisodeSignal, RewardContext, RewardOutcome, RewardSpec, Task};
//! use uniagent_tools::Finish;
//!
//! /// Solved when the `finish` answer equals the task's `answer` field.
//! #[derive(Debug)]
//! struct Echo { case_sensitive: bool }
//!
//! #[derive(Debug)]
//! struct EchoReward { case_sensitive: bool }
//!
//! #[async_trait::async_trait]
//! impl RewardSpec for EchoReward {
//!     fn name(&self) -> &str { "echo" }
//!     async fn score(&self, ctx: &RewardContext<'_>) -> uniagent_core::Result<RewardOutcome> {
//!         let want = ctx.task.metadata["answer"].as_str().unwrap_or_default();
//!         let got = match ctx.signal { Some(EpisodeSignal::Finish { answer }) => answer.as_str(), _ => "" };
//!         let ok = if self.case_sensitive { got == want } else { got.eq_ignore_ascii_case(want) };
//!         Ok(RewardOutcome::binary(ok))
//!     }
//! }
//!
//! impl Environment for Echo {
//!     fn name(&self) -> &str { "echo" }
//!     fn check_task(&self, task: &Task) -> Result<(), String> {
//!         task.metadata.get("answer").and_then(|v| v.as_str()).map(|_| ()).ok_or_else(|| "missing field `answer`".into())
//!     }
//!     fn parts(&self) -> uniagent_envs::Result<RolloutParts> {
//!         Ok(RolloutParts {
//!             tools: vec![Arc::new(Finish)],
//!             reward: Some(Arc::new(EchoReward { case_sensitive: self.case_sensitive })),
//!             sandboxes: None,
//!         })
//!     }
//! }
//!
//! #[derive(Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct EchoSettings { #[serde(default)] case_sensitive: bool }
//!
//! let mut registry = EnvironmentRegistry::builtin();
//! registry.register("echo", |s: &EnvironmentSettings<'_>| {
//!     let cfg: EchoSettings = s.decode()?;
//!     Ok(Box::new(Echo { case_sensitive: cfg.case_sensitive }) as Box<dyn Environment>)
//! });
//! assert!(registry.names().contains(&"echo"));
//! ```

mod command;
mod file_lookup;
mod harbor;
mod sandbox;
mod search_qa;
mod swe;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uniagent_core::agent::LoopConfig;
use uniagent_core::{Task, Tool};

/// What an environment hands the runner (and the training pipeline's rollouts): the one bundle
/// every rollout path assembles its runner from.
pub use uniagent_core::runner::RolloutParts;

pub use command::CommandEnvironment;
pub use file_lookup::{FileLookup, FileQuestion};
pub use harbor::HarborEnvironment;
pub use sandbox::{
    fill_template, SandboxSettings, TaskSetup, TemplatedSandboxes, SANDBOX_LIMITS_FIELD,
};
pub use search_qa::SearchQa;
pub use swe::Swe;

use crate::config::ConfigDoc;
use crate::dataset::GenerateConfig;
use crate::error::{EnvError, Result};

/// The tools of a shell task: `execute_bash` with `bash_timeout`, the file editor when
/// `editor`, and `finish` (the `command` and `harbor` environments).
pub(crate) fn shell_tools(bash_timeout: std::time::Duration, editor: bool) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![Arc::new(uniagent_tools::ExecuteBash {
        timeout: bash_timeout,
        ..uniagent_tools::ExecuteBash::default()
    })];
    if editor {
        tools.push(Arc::new(uniagent_tools::StrReplaceEditor::default()));
    }
    tools.push(Arc::new(uniagent_tools::Finish));
    tools
}

/// A family of tasks with their sandbox, tools and reward.
#[async_trait]
pub trait Environment: Send + Sync + Debug {
    /// The registered name.
    fn name(&self) -> &str;

    /// Checks that a task carries what this environment needs (called for every task before
    /// anything starts); the message names the missing or wrong field.
    fn check_task(&self, _task: &Task) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Generates tasks (for `tasks.generate`); environments that read datasets refuse.
    fn generate_tasks(&self, _spec: &GenerateConfig) -> std::result::Result<Vec<Task>, String> {
        Err(format!(
            "environment `{}` does not generate tasks: set tasks.path to a dataset",
            self.name()
        ))
    }

    /// Adjusts the loop configuration (e.g. the tool timeout a reward needs). Default: none.
    fn configure_loop(&self, _config: &mut LoopConfig) {}

    /// The tools, reward and sandbox factory.
    fn parts(&self) -> Result<RolloutParts>;

    /// What a correct agent writes at turn `turn` (0-based) of `task`: the demonstrations of
    /// the SFT warm start of `uniagent train`, run through the real loop, sandbox and reward
    /// like any rollout. `None` (the default): nothing to demonstrate at this turn; an
    /// environment without demonstrations trains by RL alone (`trainer.split.sft_tasks: 0`).
    fn demonstration(&self, _task: &Task, _turn: usize) -> Option<String> {
        None
    }

    /// Text a from-scratch tokenizer is trained on (`uniagent train` without `model.dir`).
    /// Default: each task's messages and demonstrations in the ChatML layout of the scratch
    /// policy's chat template; environments add what their observations look like.
    fn tokenizer_corpus(&self, tasks: &[Task]) -> Vec<String> {
        let mut lines = Vec::new();
        for task in tasks {
            for m in &task.messages {
                lines.push(format!(
                    "<|im_start|>{}\n{}<|im_end|>\n",
                    m.role.as_str(),
                    m.content.as_deref().unwrap_or_default()
                ));
            }
            let demos = (0..DEMONSTRATION_TURNS).map_while(|turn| self.demonstration(task, turn));
            for demo in demos {
                lines.push(format!("<|im_start|>assistant\n{demo}<|im_end|>\n"));
            }
        }
        lines
    }

    /// Checks what must exist before any sandbox starts (images, binaries, corpora).
    async fn preflight(&self, _tasks: &[Task]) -> Result<()> {
        Ok(())
    }
}

/// Most turns a demonstration is asked for (a bound for scripts that never say `None`).
pub const DEMONSTRATION_TURNS: usize = 64;

/// The `environment:` section handed to an environment's constructor.
#[derive(Debug, Clone, Copy)]
pub struct EnvironmentSettings<'a> {
    doc: &'a ConfigDoc,
    value: &'a Value,
}

impl<'a> EnvironmentSettings<'a> {
    /// Settings `value` (the section, `type` included) of document `doc`.
    pub fn new(doc: &'a ConfigDoc, value: &'a Value) -> Self {
        Self { doc, value }
    }

    /// The section without `type`, as written.
    pub fn raw(&self) -> Value {
        let mut v = self.value.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("type");
        }
        v
    }

    /// Decodes the section (without `type`); errors name `environment.<key>` and its line.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        self.doc.decode(&["environment"], &self.raw())
    }

    /// The directory relative paths are resolved against (the config file's).
    pub fn base_dir(&self) -> std::path::PathBuf {
        self.doc.base_dir()
    }
}

/// Builds an environment from its settings.
pub type EnvironmentBuilder =
    Arc<dyn Fn(&EnvironmentSettings<'_>) -> Result<Box<dyn Environment>> + Send + Sync>;

/// Environment constructors by name.
#[derive(Clone, Default)]
pub struct EnvironmentRegistry {
    builders: BTreeMap<String, EnvironmentBuilder>,
}

impl Debug for EnvironmentRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.builders.keys()).finish()
    }
}

impl EnvironmentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in environments: `file-lookup`, `command`, `search-qa`, `swe`.
    pub fn builtin() -> Self {
        let mut r = Self::new();
        r.register("file-lookup", |s: &EnvironmentSettings<'_>| {
            Ok(Box::new(FileLookup::from_settings(s)?) as Box<dyn Environment>)
        });
        r.register("command", |s: &EnvironmentSettings<'_>| {
            Ok(Box::new(CommandEnvironment::from_settings(s)?) as Box<dyn Environment>)
        });
        r.register("search-qa", |s: &EnvironmentSettings<'_>| {
            Ok(Box::new(SearchQa::from_settings(s)?) as Box<dyn Environment>)
        });
        r.register("swe", |s: &EnvironmentSettings<'_>| {
            Ok(Box::new(Swe::from_settings(s)?) as Box<dyn Environment>)
        });
        r.register("harbor", |s: &EnvironmentSettings<'_>| {
            Ok(Box::new(HarborEnvironment::from_settings(s)?) as Box<dyn Environment>)
        });
        r
    }

    /// Adds (or replaces) the environment `name`.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        builder: impl Fn(&EnvironmentSettings<'_>) -> Result<Box<dyn Environment>>
            + Send
            + Sync
            + 'static,
    ) -> &mut Self {
        self.builders.insert(name.into(), Arc::new(builder));
        self
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.builders.keys().map(String::as_str).collect()
    }

    /// Builds the environment the document's `environment` section names.
    pub fn build(&self, doc: &ConfigDoc) -> Result<Box<dyn Environment>> {
        let value = doc
            .value()
            .get("environment")
            .ok_or_else(|| doc.error_at(&["environment".into()], "missing section"))?;
        let name = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let builder = self.builders.get(name).ok_or_else(|| {
            doc.error_at(
                &["environment".into(), "type".into()],
                format!(
                    "unknown environment `{name}`, expected one of {}",
                    self.names().join(", ")
                ),
            )
        })?;
        builder(&EnvironmentSettings::new(doc, value))
    }
}

/// Checks every task: its own wall-clock limit ([`Task::time_limit`]) and what the environment
/// needs of it; the first bad one is named.
pub fn check_tasks(env: &dyn Environment, tasks: &[Task]) -> Result<()> {
    for task in tasks {
        let named = |m: String| EnvError::dataset(format!("task `{}`", task.id), None, m);
        task.time_limit().map_err(named)?;
        env.check_task(task)
            .map_err(|m| named(format!("{m} (needed by environment `{}`)", env.name())))?;
    }
    Ok(())
}
