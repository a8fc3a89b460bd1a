//! The task family: a question whose answer lives in a file inside the host sandbox.
//!
//! Each task picks a few names and gives each a random 3-digit code, written as
//! `data/<name>.txt` in the sandbox when it starts. The question asks for one name's code;
//! the agent must read the file with `execute_bash` and return the code with `finish`
//! (two tool turns). The reward reads the sandbox's file again and compares it with the
//! `finish` answer.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use uniagent_core::{
    Deployment, DeploymentExt, EpisodeSignal, Error, Message, Result, RewardContext, RewardOutcome,
    RewardSpec, Task,
};

/// The names whose codes the sandboxes hold.
pub const NAMES: [&str; 16] = [
    "apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "ocean", "pixel", "raven",
    "cedar", "ember", "frost", "grape", "honey", "ivory",
];

/// One generated task: which name is asked about, and every file of its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileQuestion {
    /// Task id.
    pub id: String,
    /// The name asked about.
    pub target: String,
    /// `(name, code)` for every file of the sandbox.
    pub files: Vec<(String, String)>,
}

impl FileQuestion {
    /// A task drawn from `rng`: `files` distinct names (1 to 16) with codes, one of them
    /// asked.
    pub fn generate(id: String, files: usize, rng: &mut fastrand::Rng) -> Self {
        let mut names: Vec<&str> = NAMES.to_vec();
        rng.shuffle(&mut names);
        let files: Vec<(String, String)> = names[..files.clamp(1, NAMES.len())]
            .iter()
            .map(|n| ((*n).to_owned(), rng.u32(100..1000).to_string()))
            .collect();
        let target = files[rng.usize(..files.len())].0.clone();
        Self { id, target, files }
    }

    /// The code that answers the question.
    pub fn answer(&self) -> &str {
        self.files
            .iter()
            .find(|(n, _)| *n == self.target)
            .map_or("", |(_, c)| c.as_str())
    }

    /// The user question.
    pub fn question(&self) -> String {
        format!(
            "What is the code of {}? The codes are in files under data/.",
            self.target
        )
    }

    /// The task as the loop sees it (metadata: `target`, `files`).
    pub fn to_task(&self) -> Task {
        Task::new(self.id.clone(), vec![Message::user(self.question())])
            .with_metadata("target", json!(self.target))
            .with_metadata("answer", json!(self.answer()))
            .with_metadata("files", json!(self.files))
    }

    /// The shell script that writes the sandbox's files.
    pub fn setup_script(&self) -> String {
        let mut s = String::from("mkdir -p data");
        for (name, code) in &self.files {
            s.push_str(&format!(" && echo {code} > data/{name}.txt"));
        }
        s
    }

    /// Reads a task back from its metadata.
    pub fn from_task(task: &Task) -> Result<Self> {
        let target = task.metadata["target"]
            .as_str()
            .ok_or_else(|| Error::invalid_input("task metadata has no `target`"))?
            .to_owned();
        let files: Vec<(String, String)> =
            serde_json::from_value(task.metadata["files"].clone())
                .map_err(|e| Error::invalid_input(format!("task metadata `files`: {e}")))?;
        Ok(Self {
            id: task.id.clone(),
            target,
            files,
        })
    }
}

/// 1.0 when the `finish` answer equals the code in the sandbox's file for the asked name.
#[derive(Debug, Default)]
pub struct CodeReward;

#[async_trait]
impl RewardSpec for CodeReward {
    fn name(&self) -> &str {
        "file-code"
    }

    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        let answer = match ctx.signal {
            Some(EpisodeSignal::Finish { answer }) => answer.trim().to_owned(),
            _ => return Ok(RewardOutcome::binary(false)),
        };
        let target = ctx.task.metadata["target"].as_str().unwrap_or_default();
        let sandbox: &Arc<dyn Deployment> = ctx
            .deployment
            .ok_or_else(|| Error::internal("the reward needs the task's sandbox"))?;
        let truth = sandbox
            .sh(&format!("cat data/{target}.txt"), 10.0)
            .await?
            .stdout;
        let truth = truth.trim();
        Ok(RewardOutcome::binary(!truth.is_empty() && answer == truth)
            .with_detail("expected", json!(truth)))
    }
}
