//! `harbor`: Harbor tasks (`tasks: {harbor: DIR}`). Each rollout's sandbox is the task's image
//! (built from its `environment/` before anything starts, or its `docker_image`) in its working
//! directory; the agent has bash, the editor and `finish`; the reward is the task's verifier
//! run in the agent's sandbox afterwards ([`HarborVerifier`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uniagent_core::Task;
use uniagent_envs::DeploymentConfig;
use uniagent_rewards::harbor::{HarborVerifier, HARBOR_DIR_FIELD};

use super::{
    Environment, EnvironmentParts, EnvironmentSettings, SandboxSettings, TemplatedSandboxes,
};
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
    DeploymentConfig::from(uniagent_envs::DockerConfig {
        image: "{image}".into(),
        work_dir: "{workdir}".into(),
        ..uniagent_envs::DockerConfig::default()
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

    fn parts(&self) -> Result<EnvironmentParts> {
        let tools = super::shell_tools(self.settings.bash_timeout, self.settings.editor);
        Ok(EnvironmentParts {
            tools,
            reward: Some(Arc::new(self.settings.verifier.clone())),
            sandboxes: Some(Arc::new(self.sandboxes())),
        })
    }

    /// Builds each task image that is missing (one build per distinct image), then checks the
    /// sandboxes as every environment does.
    async fn preflight(&self, tasks: &[Task]) -> Result<()> {
        build_images(tasks).await?;
        self.sandboxes().preflight(tasks).await
    }
}

#[cfg(feature = "docker")]
async fn build_images(tasks: &[Task]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for task in tasks {
        let field = |name: &str| task.metadata.get(name);
        if field("build_image") != Some(&serde_json::Value::Bool(true)) {
            continue;
        }
        let (Some(image), Some(dir)) = (
            field("image").and_then(|v| v.as_str()),
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
        let context = std::path::Path::new(dir).join("environment");
        let built =
            uniagent_envs::docker::build_context(&context, image, Duration::from_secs_f64(timeout))
                .await
                .map_err(|e| {
                    crate::error::CliError::preflight(format!(
                        "building the image of task `{}`: {e}",
                        task.id
                    ))
                })?;
        if built {
            eprintln!("built image {image} for task `{}`", task.id);
        }
    }
    Ok(())
}

#[cfg(not(feature = "docker"))]
async fn build_images(_tasks: &[Task]) -> Result<()> {
    Ok(())
}
