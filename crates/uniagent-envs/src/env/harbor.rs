//! `harbor`: Harbor tasks (`tasks: {harbor: DIR}`). Each rollout's sandbox is the task's image
//! (built from its `environment/` before anything starts, or its `docker_image`) in its working
//! directory, under the task's own limits; the agent has bash, the editor and `finish`; the
//! reward is the task's verifier ([`HarborVerifier`]), run in the agent's sandbox afterwards, or
//! in a fresh sandbox of the verifier's image holding the agent's final working directory when
//! the task's verifier is "separate".

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_core::runner::SandboxFactory;
use uniagent_core::{Deployment, RewardContext, RewardOutcome, RewardSpec, Task};
use uniagent_rewards::harbor::{HarborTask, HarborVerifier, VerifierMode, HARBOR_DIR_FIELD};
use uniagent_rewards::RewardError;
use uniagent_sandboxes::DeploymentConfig;

use super::{
    Environment, EnvironmentSettings, RolloutParts, SandboxSettings, TemplatedSandboxes,
    SANDBOX_LIMITS_FIELD,
};
use crate::dataset::{VERIFIER_IMAGE_FIELD, VERIFIER_LIMITS_FIELD};
use crate::error::Result;

/// Settings of `harbor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct HarborSettings {
    /// The sandbox backend; its per-task fields read the task's `{image}` and `{workdir}`
    /// (the default: Docker with `image: "{image}"`, `work_dir: "{workdir}"`).
    pub sandbox: DeploymentConfig,
    /// The verifier: which key of `reward.json` is the score.
    pub verifier: HarborVerifier,
    /// Offer the file editor besides bash.
    pub editor: bool,
    /// How long one `execute_bash` call may take (seconds in configs).
    #[serde(with = "uniagent_core::duration_secs")]
    pub bash_timeout: Duration,
}

impl Default for HarborSettings {
    fn default() -> Self {
        Self {
            sandbox: default_sandbox(),
            verifier: HarborVerifier::default(),
            editor: true,
            bash_timeout: Duration::from_secs(180),
        }
    }
}

#[cfg(feature = "docker")]
fn default_sandbox() -> DeploymentConfig {
    DeploymentConfig::from(uniagent_sandboxes::DockerConfig {
        image: "{image}".into(),
        work_dir: "{workdir}".into(),
        ..uniagent_sandboxes::DockerConfig::default()
    })
}

#[cfg(not(feature = "docker"))]
fn default_sandbox() -> DeploymentConfig {
    DeploymentConfig::default()
}

/// The `harbor` environment.
#[derive(Debug, Clone, Default)]
pub struct HarborEnvironment {
    settings: HarborSettings,
}

impl HarborEnvironment {
    /// From the config section.
    pub fn from_settings(s: &EnvironmentSettings<'_>) -> Result<Self> {
        Ok(Self {
            settings: s.decode()?,
        })
    }

    fn sandboxes(&self) -> TemplatedSandboxes {
        let settings = SandboxSettings::of(&self.settings.sandbox, &[], Duration::from_secs(60));
        TemplatedSandboxes::new(settings, None)
    }
}

#[async_trait]
impl Environment for HarborEnvironment {
    fn name(&self) -> &str {
        "harbor"
    }

    fn check_task(&self, task: &Task) -> std::result::Result<(), String> {
        for field in [HARBOR_DIR_FIELD, "image", "workdir"] {
            if !task.metadata.get(field).is_some_and(|v| v.is_string()) {
                return Err(format!(
                    "missing field `{field}`: harbor tasks come from `tasks: {{harbor: DIR}}`"
                ));
            }
        }
        Ok(())
    }

    fn parts(&self) -> Result<RolloutParts> {
        let tools = super::shell_tools(self.settings.bash_timeout, self.settings.editor);
        let reward = HarborReward {
            verifier: self.settings.verifier.clone(),
            sandboxes: self.sandboxes(),
        };
        Ok(RolloutParts {
            tools,
            reward: Some(Arc::new(reward)),
            sandboxes: Some(Arc::new(self.sandboxes())),
        })
    }

    /// Builds each task and verifier image that is missing (one build per distinct image),
    /// then checks the sandboxes, the separate verifiers' included, as every environment does.
    async fn preflight(&self, tasks: &[Task]) -> Result<()> {
        build_images(tasks).await?;
        let mut all = tasks.to_vec();
        all.extend(tasks.iter().filter_map(verifier_task));
        self.sandboxes().preflight(&all).await
    }
}

/// The task whose sandbox is `task`'s separate verifier: the verifier's image and limits in
/// place of the agent's; `None` when the verifier shares the agent's sandbox.
fn verifier_task(task: &Task) -> Option<Task> {
    let image = task.metadata.get(VERIFIER_IMAGE_FIELD)?.clone();
    let mut verifier = task.clone();
    verifier.id = format!("{}-verifier", task.id);
    verifier.metadata.insert("image".into(), image);
    match task.metadata.get(VERIFIER_LIMITS_FIELD) {
        Some(limits) => verifier
            .metadata
            .insert(SANDBOX_LIMITS_FIELD.into(), limits.clone()),
        None => verifier.metadata.remove(SANDBOX_LIMITS_FIELD),
    };
    Some(verifier)
}

/// The reward of `harbor`: the task's verifier in the agent's sandbox (shared), or in a fresh
/// sandbox of [`verifier_task`] started for it and stopped afterwards (separate).
#[derive(Debug)]
struct HarborReward {
    verifier: HarborVerifier,
    sandboxes: TemplatedSandboxes,
}

#[async_trait]
impl RewardSpec for HarborReward {
    fn name(&self) -> &str {
        "harbor"
    }

    async fn score(&self, ctx: &RewardContext<'_>) -> uniagent_core::Result<RewardOutcome> {
        let harbor = load(ctx.task).map_err(|e| e.into_core("harbor"))?;
        if harbor.verifier_mode() == VerifierMode::Shared {
            return self.verifier.score(ctx).await;
        }
        self.separate(ctx, &harbor)
            .await
            .map_err(|e| e.into_core("harbor"))
    }
}

impl HarborReward {
    async fn separate(
        &self,
        ctx: &RewardContext<'_>,
        harbor: &HarborTask,
    ) -> std::result::Result<RewardOutcome, RewardError> {
        let agent = ctx.deployment.ok_or(RewardError::NoSandbox)?;
        let workdir = string_field(ctx.task, "workdir")?;
        let task = verifier_task(ctx.task).ok_or_else(|| RewardError::MissingMetadata {
            field: VERIFIER_IMAGE_FIELD.into(),
        })?;
        let failed = |what: &str, e: uniagent_core::Error| RewardError::VerifierFailed {
            message: format!("{what} the verifier's sandbox: {e}"),
        };
        let fresh: Arc<dyn Deployment> = Arc::from(
            self.sandboxes
                .create(&task)
                .map_err(|e| failed("creating", e))?,
        );
        let outcome = async {
            fresh.start().await.map_err(|e| failed("starting", e))?;
            self.verifier
                .verify_separate(agent, &fresh, harbor, &workdir)
                .await
        }
        .await;
        if let Err(e) = fresh.stop().await {
            eprintln!(
                "warning: stopping the verifier's sandbox of {}: {e}",
                ctx.task.id
            );
        }
        outcome
    }
}

/// The Harbor task of `task` (its `harbor_dir`).
fn load(task: &Task) -> std::result::Result<HarborTask, RewardError> {
    let dir = PathBuf::from(string_field(task, HARBOR_DIR_FIELD)?);
    HarborTask::load(&dir).map_err(|e| RewardError::BadMetadata {
        field: HARBOR_DIR_FIELD.into(),
        message: e.to_string(),
    })
}

fn string_field(task: &Task, field: &str) -> std::result::Result<String, RewardError> {
    match task.metadata.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(RewardError::BadMetadata {
            field: field.into(),
            message: "must be a string".into(),
        }),
        None => Err(RewardError::MissingMetadata {
            field: field.into(),
        }),
    }
}

#[cfg(feature = "docker")]
async fn build_images(tasks: &[Task]) -> Result<()> {
    use crate::dataset::BUILD_VERIFIER_IMAGE_FIELD;
    // (the image's field, the field saying it is built here, its build context, what it is)
    let kinds = [
        ("image", "build_image", "environment", "image"),
        (
            VERIFIER_IMAGE_FIELD,
            BUILD_VERIFIER_IMAGE_FIELD,
            "tests",
            "verifier image",
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    for task in tasks {
        for (image_field, build_field, context, what) in kinds {
            let field = |name: &str| task.metadata.get(name);
            if field(build_field) != Some(&Value::Bool(true)) {
                continue;
            }
            let (Some(image), Some(dir)) = (
                field(image_field).and_then(|v| v.as_str()),
                field(HARBOR_DIR_FIELD).and_then(|v| v.as_str()),
            ) else {
                continue;
            };
            if !seen.insert(image.to_owned()) {
                continue;
            }
            let timeout = field("build_timeout_sec")
                .and_then(|v| v.as_f64())
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(600.0);
            let context = std::path::Path::new(dir).join(context);
            let timeout = Duration::from_secs_f64(timeout);
            let built = uniagent_sandboxes::docker::build_context(&context, image, timeout)
                .await
                .map_err(|e| {
                    crate::error::EnvError::preflight(format!(
                        "building the {what} of task `{}`: {e}",
                        task.id
                    ))
                })?;
            if built {
                eprintln!("built {what} {image} for task `{}`", task.id);
            }
        }
    }
    Ok(())
}

#[cfg(not(feature = "docker"))]
async fn build_images(_tasks: &[Task]) -> Result<()> {
    Ok(())
}
