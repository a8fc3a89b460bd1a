//! `file-lookup`: the quickstart's task family. Each task gives a few names a random 3-digit
//! code, written as `data/<name>.txt` in a fresh sandbox by the setup hook; the question asks
//! for one name's code, which the agent reads with `execute_bash` and returns with `finish`.
//! The reward reads the sandbox's file again and compares.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uniagent_core::{
    Deployment, DeploymentExt, EpisodeSignal, Error, Message, RewardContext, RewardOutcome,
    RewardSpec, Task,
};
use uniagent_sandboxes::DeploymentConfig;
use uniagent_tools::{ExecuteBash, Finish};

use super::{
    Environment, EnvironmentSettings, RolloutParts, SandboxSettings, TaskSetup, TemplatedSandboxes,
};
use crate::dataset::GenerateConfig;
use crate::error::Result;

/// The names whose codes the sandboxes hold.
pub(super) const NAMES: [&str; 16] = [
    "apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "ocean", "pixel", "raven",
    "cedar", "ember", "frost", "grape", "honey", "ivory",
];

/// One generated task: the name asked about and every `(name, code)` file of its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileQuestion {
    /// Task id.
    pub id: String,
    /// The name asked about.
    pub target: String,
    /// `(name, code)` for every file.
    pub files: Vec<(String, String)>,
}

impl FileQuestion {
    /// A task drawn from `rng`: `files` distinct names (1 to 16) with codes, one of them asked.
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

    /// The task as the loop sees it (metadata: `target`, `answer`, `files`).
    pub fn to_task(&self) -> Task {
        let question = format!(
            "What is the code of {}? The codes are in files under data/.",
            self.target
        );
        Task::new(self.id.clone(), vec![Message::user(question)])
            .with_metadata("target", json!(self.target))
            .with_metadata("answer", json!(self.answer()))
            .with_metadata("files", json!(self.files))
    }

    /// Reads a task back from its metadata.
    pub fn from_task(task: &Task) -> std::result::Result<Self, String> {
        let target = task
            .metadata
            .get("target")
            .and_then(|v| v.as_str())
            .ok_or("missing field `target`")?
            .to_owned();
        let files: Vec<(String, String)> =
            serde_json::from_value(task.metadata.get("files").cloned().unwrap_or_default())
                .map_err(|e| format!("field `files` must be a list of [name, code] pairs: {e}"))?;
        let safe = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if let Some((n, c)) = files.iter().find(|(n, c)| !safe(n) || !safe(c)) {
            return Err(format!(
                "field `files`: `{n}`/`{c}` must be letters, digits, `_` or `-`"
            ));
        }
        if !files.iter().any(|(n, _)| *n == target) {
            return Err(format!(
                "field `files` has no file for the target `{target}`"
            ));
        }
        Ok(Self {
            id: task.id.clone(),
            target,
            files,
        })
    }

    /// What a correct agent writes at turn `turn`: read the asked file with `execute_bash`,
    /// then `finish` with its code; `None` after that.
    pub fn demonstration(&self, turn: usize) -> Option<String> {
        match turn {
            0 => Some(format!(
                "<tool_call>\n{{\"name\": \"execute_bash\", \"arguments\": {{\"command\": \"cat data/{}.txt\"}}}}\n</tool_call>",
                self.target
            )),
            1 => Some(format!(
                "<tool_call>\n{{\"name\": \"finish\", \"arguments\": {{\"answer\": \"{}\"}}}}\n</tool_call>",
                self.answer()
            )),
            _ => None,
        }
    }

    /// The shell script that writes the sandbox's files.
    pub fn setup_script(&self) -> String {
        let mut s = String::from("mkdir -p data");
        for (name, code) in &self.files {
            s.push_str(&format!(" && echo {code} > data/{name}.txt"));
        }
        s
    }
}

/// Settings of `file-lookup`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileLookupSettings {
    /// Files in each generated task's sandbox.
    pub files_per_task: usize,
    /// How long one `execute_bash` call may take (seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub bash_timeout: Duration,
    /// The sandbox backend (host by default).
    pub sandbox: DeploymentConfig,
    /// Extra setup commands, run after the task's files are written.
    pub setup: Vec<String>,
    /// How long each setup command may take (seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub setup_timeout: Duration,
}

impl FileLookupSettings {
    fn sandbox_settings(&self) -> SandboxSettings {
        SandboxSettings::of(&self.sandbox, &self.setup, self.setup_timeout)
    }
}

impl Default for FileLookupSettings {
    fn default() -> Self {
        Self {
            files_per_task: 3,
            bash_timeout: Duration::from_secs(10),
            sandbox: DeploymentConfig::default(),
            setup: Vec::new(),
            setup_timeout: Duration::from_secs(60),
        }
    }
}

/// The `file-lookup` environment.
#[derive(Debug, Clone)]
pub struct FileLookup {
    settings: FileLookupSettings,
}

impl FileLookup {
    /// From the config section.
    pub fn from_settings(s: &EnvironmentSettings<'_>) -> Result<Self> {
        Ok(Self::new(s.decode()?))
    }

    /// From settings.
    pub fn new(settings: FileLookupSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl Environment for FileLookup {
    fn name(&self) -> &str {
        "file-lookup"
    }

    fn check_task(&self, task: &Task) -> std::result::Result<(), String> {
        FileQuestion::from_task(task).map(|_| ())
    }

    fn generate_tasks(&self, spec: &GenerateConfig) -> std::result::Result<Vec<Task>, String> {
        let mut rng = fastrand::Rng::with_seed(spec.seed);
        Ok((0..spec.count)
            .map(|i| {
                FileQuestion::generate(
                    format!("lookup-{i}"),
                    self.settings.files_per_task,
                    &mut rng,
                )
                .to_task()
            })
            .collect())
    }

    fn parts(&self) -> Result<RolloutParts> {
        let setup: TaskSetup = Arc::new(|task: &Task| {
            let q = FileQuestion::from_task(task).map_err(Error::invalid_input)?;
            Ok(vec![q.setup_script()])
        });
        Ok(RolloutParts {
            tools: vec![
                Arc::new(ExecuteBash {
                    timeout: self.settings.bash_timeout,
                    ..ExecuteBash::default()
                }),
                Arc::new(Finish),
            ],
            reward: Some(Arc::new(CodeReward)),
            sandboxes: Some(Arc::new(TemplatedSandboxes::new(
                self.settings.sandbox_settings(),
                Some(setup),
            ))),
        })
    }

    fn demonstration(&self, task: &Task, turn: usize) -> Option<String> {
        let q = FileQuestion::from_task(task).ok()?;
        q.demonstration(turn)
    }

    fn tokenizer_corpus(&self, tasks: &[Task]) -> Vec<String> {
        // What the policy reads and writes: question, the two correct turns and the
        // observation between them (the code, as `cat` prints it).
        let mut lines = Vec::new();
        for q in tasks.iter().filter_map(|t| FileQuestion::from_task(t).ok()) {
            let question = &q.to_task().messages[0];
            lines.push(format!(
                "<|im_start|>user\n{}<|im_end|>\n",
                question.content.as_deref().unwrap_or_default()
            ));
            for (turn, observation) in [(0, Some(q.answer())), (1, None)] {
                if let Some(demo) = q.demonstration(turn) {
                    lines.push(format!("<|im_start|>assistant\n{demo}<|im_end|>\n"));
                }
                if let Some(o) = observation {
                    lines.push(format!("<|im_start|>tool\n{o}\n<|im_end|>\n"));
                }
            }
        }
        lines
    }

    async fn preflight(&self, tasks: &[Task]) -> Result<()> {
        TemplatedSandboxes::new(self.settings.sandbox_settings(), None)
            .preflight(tasks)
            .await
    }
}

/// 1.0 when the `finish` answer equals the code in the sandbox's file for the asked name.
/// Details: `expected` (the file's code; the task's when there is no answer) and `given` (the
/// trimmed answer, `null` when the agent did not finish).
#[derive(Debug, Default)]
pub(super) struct CodeReward;

#[async_trait]
impl RewardSpec for CodeReward {
    fn name(&self) -> &str {
        "file-code"
    }

    async fn score(&self, ctx: &RewardContext<'_>) -> uniagent_core::Result<RewardOutcome> {
        let q = FileQuestion::from_task(ctx.task).map_err(Error::invalid_input)?;
        let answer = match ctx.signal {
            Some(EpisodeSignal::Finish { answer }) => answer.trim().to_owned(),
            // No answer given: nothing to compare, the sandbox is not read again.
            _ => {
                return Ok(RewardOutcome::binary(false)
                    .with_detail("expected", json!(q.answer()))
                    .with_detail("given", Value::Null))
            }
        };
        let sandbox: &Arc<dyn Deployment> = ctx
            .deployment
            .ok_or_else(|| Error::internal("the file-code reward needs the task's sandbox"))?;
        // Generous: under heavy load (1,000 sandboxes on two cores) a `cat` can take seconds.
        let truth = sandbox
            .sh(
                &format!("cat data/{}.txt", q.target),
                Duration::from_secs(60),
            )
            .await?
            .stdout;
        let truth = truth.trim();
        Ok(RewardOutcome::binary(!truth.is_empty() && answer == truth)
            .with_detail("expected", json!(truth))
            .with_detail("given", json!(answer)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use uniagent_core::testing::ScriptedDeployment;

    use super::*;

    fn question() -> FileQuestion {
        FileQuestion {
            id: "t".into(),
            target: "apple".into(),
            files: vec![
                ("apple".into(), "123".into()),
                ("river".into(), "456".into()),
            ],
        }
    }

    async fn score(signal: Option<EpisodeSignal>) -> RewardOutcome {
        let task = question().to_task();
        let sandbox: Arc<dyn Deployment> =
            Arc::new(ScriptedDeployment::new().on_command("cat data/apple.txt", "123\n", 0));
        let ctx = RewardContext {
            task: &task,
            messages: &[],
            signal: signal.as_ref(),
            deployment: Some(&sandbox),
        };
        CodeReward.score(&ctx).await.unwrap()
    }

    fn finish(answer: &str) -> Option<EpisodeSignal> {
        Some(EpisodeSignal::Finish {
            answer: answer.into(),
        })
    }

    #[tokio::test]
    async fn reward_records_the_answer_given_next_to_the_expected_one() {
        let wrong = score(finish(" 456 ")).await;
        assert!(!wrong.success);
        assert_eq!(wrong.details["expected"], json!("123"));
        assert_eq!(wrong.details["given"], json!("456"));

        let right = score(finish("123")).await;
        assert!(right.success);
        assert_eq!(right.details["expected"], json!("123"));
        assert_eq!(right.details["given"], json!("123"));

        // No finish: no answer was given, and `given` says so rather than being left out.
        let none = score(None).await;
        assert!(!none.success);
        assert_eq!(none.details["expected"], json!("123"));
        assert_eq!(none.details.get("given"), Some(&Value::Null));
    }
}
