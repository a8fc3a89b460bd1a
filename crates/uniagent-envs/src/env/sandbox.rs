//! The sandbox side of an environment: a deployment config whose image is a per-task template
//! (`{instance_id}`), and setup commands run once, after the sandbox starts and before the
//! loop, by a wrapper the factory puts around every deployment (the setup hook).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_core::layer::With;
use uniagent_core::runner::SandboxFactory;
use uniagent_core::sandbox::Setup;
use uniagent_core::{Deployment, Error, Task};
use uniagent_sandboxes::{DeploymentConfig, SandboxLimits};

use crate::error::{EnvError, Result};

/// The task metadata field holding the task's own sandbox limits ([`SandboxLimits`]: `cpus`,
/// `memory_bytes`, `no_network`), applied over the configured backend's for that task's sandbox
/// (Harbor tasks set it from `[environment]`).
pub const SANDBOX_LIMITS_FIELD: &str = "sandbox_limits";

/// The `sandbox:` and `setup:` settings shared by environments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    /// The backend (`type: host | docker | remote | faas`); `{field}` in a per-task field (the
    /// `image` of docker and faas) is replaced by the task's metadata field (`{instance_id}`,
    /// `{id}`).
    #[serde(default)]
    pub sandbox: DeploymentConfig,
    /// Shell commands run once in every fresh sandbox before the loop (`{field}` substituted).
    #[serde(default)]
    pub setup: Vec<String>,
    /// How long each setup command may take (seconds in configs).
    #[serde(
        default = "default_setup_timeout",
        with = "uniagent_core::duration_secs"
    )]
    pub setup_timeout: Duration,
}

impl SandboxSettings {
    /// The sandbox part of an environment's settings (its `sandbox`, `setup` and
    /// `setup_timeout` fields).
    pub fn of(sandbox: &DeploymentConfig, setup: &[String], setup_timeout: Duration) -> Self {
        SandboxSettings {
            sandbox: sandbox.clone(),
            setup: setup.to_vec(),
            setup_timeout,
        }
    }
}

fn default_setup_timeout() -> Duration {
    Duration::from_secs(600)
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            sandbox: DeploymentConfig::default(),
            setup: Vec::new(),
            setup_timeout: default_setup_timeout(),
        }
    }
}

/// Extra setup computed from each task (e.g. the files a generated task needs).
pub type TaskSetup = Arc<dyn Fn(&Task) -> uniagent_core::Result<Vec<String>> + Send + Sync>;

/// Replaces `{name}` by the task's metadata field `name` (strings and numbers; `id` is the task
/// id). With `strict`, a placeholder without a value is an error; otherwise it stays as
/// written, so shell braces (`${HOME}`, `{a,b}`) pass through.
///
/// ```
/// use uniagent_envs::env::fill_template;
/// use uniagent_core::Task;
/// let task = Task::new("t1", vec![]).with_metadata("instance_id", "django__django-1".into());
/// assert_eq!(fill_template("swe:{instance_id}", &task, true).unwrap(), "swe:django__django-1");
/// assert_eq!(fill_template("echo ${HOME} {id}", &task, false).unwrap(), "echo ${HOME} t1");
/// assert!(fill_template("img:{nope}", &task, true).is_err());
/// ```
pub fn fill_template(
    template: &str,
    task: &Task,
    strict: bool,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}');
        let name = close.map(|c| &after[..c]);
        match name {
            Some(name)
                if !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                match template_field(task, name) {
                    Some(v) => out.push_str(&v),
                    None if strict => {
                        return Err(format!(
                            "task `{}` has no field `{name}` for `{{{name}}}`",
                            task.id
                        ))
                    }
                    None => {
                        out.push('{');
                        out.push_str(name);
                        out.push('}');
                    }
                }
                rest = &after[name.len() + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of `{name}` for `task`: its id, or a string or number metadata field.
fn template_field(task: &Task, name: &str) -> Option<String> {
    if name == "id" {
        return Some(task.id.clone());
    }
    match task.metadata.get(name) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

/// Builds every rollout's sandbox from [`SandboxSettings`] and wraps it in the setup hook.
#[derive(Clone)]
pub struct TemplatedSandboxes {
    settings: SandboxSettings,
    task_setup: Option<TaskSetup>,
}

impl std::fmt::Debug for TemplatedSandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplatedSandboxes")
            .field("settings", &self.settings)
            .field("task_setup", &self.task_setup.is_some())
            .finish()
    }
}

impl TemplatedSandboxes {
    /// A factory for `settings`; `task_setup` adds per-task commands before the configured
    /// ones.
    pub fn new(settings: SandboxSettings, task_setup: Option<TaskSetup>) -> Self {
        Self {
            settings,
            task_setup,
        }
    }

    /// The deployment config of `task`: every per-task field of the backend (a docker or faas
    /// `image`) with its `{field}` template filled in, and the task's own limits
    /// ([`SANDBOX_LIMITS_FIELD`]) over the configured ones. An error names the key.
    pub fn config_for(&self, task: &Task) -> std::result::Result<DeploymentConfig, String> {
        let mut config = self.settings.sandbox.clone();
        for (key, value) in config.per_task_fields() {
            *value = fill_template(value, task, true).map_err(|m| format!("{key}: {m}"))?;
        }
        if let Some(value) = task.metadata.get(SANDBOX_LIMITS_FIELD) {
            let named = |m: String| format!("{SANDBOX_LIMITS_FIELD} of task `{}`: {m}", task.id);
            let limits: SandboxLimits =
                serde_json::from_value(value.clone()).map_err(|e| named(e.to_string()))?;
            config
                .apply_limits(&limits)
                .map_err(|e| named(e.to_string()))?;
        }
        Ok(config)
    }

    /// The setup commands of `task`, in order.
    pub fn setup_for(&self, task: &Task) -> uniagent_core::Result<Vec<String>> {
        let mut commands = match &self.task_setup {
            Some(f) => f(task)?,
            None => Vec::new(),
        };
        for c in &self.settings.setup {
            commands.push(fill_template(c, task, false).map_err(Error::invalid_input)?);
        }
        Ok(commands)
    }

    /// Checks, before anything starts, that every task's sandbox can be built: the backend is
    /// compiled in and valid, the template fills in, and the backend's own preflight passes for
    /// every distinct config (docker: the image exists locally; host: the server binary is
    /// found).
    pub async fn preflight(&self, tasks: &[Task]) -> Result<()> {
        // Distinct configs with the first task that needs each: one check per image, not per
        // task.
        let mut distinct: Vec<(DeploymentConfig, &str)> = Vec::new();
        for task in tasks {
            let config = self
                .config_for(task)
                .map_err(|m| EnvError::preflight(format!("environment.sandbox.{m}")))?;
            config
                .validate()
                .map_err(|e| EnvError::preflight(format!("environment.sandbox: {e}")))?;
            self.setup_for(task).map_err(|e| {
                EnvError::preflight(format!("environment.setup for task `{}`: {e}", task.id))
            })?;
            if !distinct.iter().any(|(seen, _)| *seen == config) {
                distinct.push((config, &task.id));
            }
        }
        for (config, task) in &distinct {
            config.preflight().await.map_err(|e| {
                EnvError::preflight(format!("environment.sandbox (task `{task}`): {e}"))
            })?;
        }
        Ok(())
    }
}

impl SandboxFactory for TemplatedSandboxes {
    fn create(&self, task: &Task) -> uniagent_core::Result<Box<dyn Deployment>> {
        let config = self.config_for(task).map_err(Error::invalid_input)?;
        let setup = Setup::new(self.setup_for(task)?, self.settings.setup_timeout);
        Ok(config.build()?.with(&setup))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uniagent_sandboxes::{DockerConfig, NetworkMode};

    use super::*;

    fn sandboxes(sandbox: DeploymentConfig) -> TemplatedSandboxes {
        TemplatedSandboxes::new(
            SandboxSettings::of(&sandbox, &[], Duration::from_secs(1)),
            None,
        )
    }

    #[test]
    fn a_tasks_limits_replace_the_configured_ones_for_its_sandbox_only() {
        let configured = DockerConfig {
            image: "{image}".into(),
            network: NetworkMode::Bridge,
            ..DockerConfig::default()
        };
        let factory = sandboxes(configured.clone().into());
        let plain = Task::new("plain", vec![]).with_metadata("image", json!("img:1"));
        let limited = plain.clone().with_metadata(
            SANDBOX_LIMITS_FIELD,
            json!({"cpus": 0.5, "memory_bytes": 300u64 << 20, "no_network": true}),
        );
        let DeploymentConfig::Docker(d) = factory.config_for(&limited).unwrap() else {
            panic!("not docker")
        };
        assert_eq!(
            (d.image.as_str(), d.cpus, d.memory_bytes, d.network),
            ("img:1", Some(0.5), Some(300 << 20), NetworkMode::None)
        );
        let DeploymentConfig::Docker(d) = factory.config_for(&plain).unwrap() else {
            panic!("not docker")
        };
        assert_eq!(
            (d.cpus, d.memory_bytes, d.network),
            (
                configured.cpus,
                configured.memory_bytes,
                NetworkMode::Bridge
            )
        );
        // A malformed field, or a backend that cannot apply them: named errors.
        let bad = plain
            .clone()
            .with_metadata(SANDBOX_LIMITS_FIELD, json!({"cpu": 1}));
        let err = factory.config_for(&bad).unwrap_err();
        assert!(err.contains("sandbox_limits of task `plain`"), "{err}");
        let host = sandboxes(DeploymentConfig::default());
        let err = host.config_for(&limited).unwrap_err();
        assert!(err.contains("`host` backend"), "{err}");
    }
}
