//! `task.toml` of a Harbor task: the tables and keys uniagent reads, with Harbor's defaults.
//! Keys it does not know are ignored, as Harbor's own loader ignores them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The whole `task.toml`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskConfig {
    /// `schema_version` (the older top-level `version` is read as it).
    #[serde(alias = "version")]
    pub schema_version: Option<String>,
    /// `[task]`: the package name (`org/name`) and description, when the task is published.
    pub task: Option<PackageInfo>,
    /// `[metadata]`: free-form (difficulty, category, tags...).
    pub metadata: Map<String, Value>,
    /// `[agent]`.
    pub agent: AgentSection,
    /// `[verifier]`.
    pub verifier: VerifierSection,
    /// `[environment]`.
    pub environment: EnvironmentSection,
    /// `[solution]`.
    pub solution: SolutionSection,
    /// `[[steps]]` of a multi-step task (not run by uniagent: refused when present).
    pub steps: Option<Vec<Value>>,
}

/// `[task]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PackageInfo {
    /// `org/name`.
    pub name: String,
    /// What the task is.
    pub description: String,
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentSection {
    /// Seconds the agent may take; `None`: no limit of the task's own.
    pub timeout_sec: Option<f64>,
}

/// `[verifier]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifierSection {
    /// Seconds the whole verification may take (default 600).
    pub timeout_sec: f64,
    /// Environment variables of `test.sh` (`${VAR}` and `${VAR:-default}` read from the host).
    pub env: BTreeMap<String, String>,
    /// `shared` (in the agent's container) or `separate` (a fresh one); `None`: `separate`
    /// when `[verifier.environment]` is set, else `shared`.
    pub environment_mode: Option<VerifierMode>,
    /// The separate verifier's environment.
    pub environment: Option<EnvironmentSection>,
}

impl Default for VerifierSection {
    fn default() -> Self {
        Self {
            timeout_sec: 600.0,
            env: BTreeMap::new(),
            environment_mode: None,
            environment: None,
        }
    }
}

/// Where `test.sh` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifierMode {
    /// In the agent's container, after the agent.
    Shared,
    /// In a fresh container.
    Separate,
}

/// `[environment]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnvironmentSection {
    /// Seconds building and starting the image may take (default 600).
    pub build_timeout_sec: f64,
    /// A prebuilt image instead of `environment/Dockerfile`.
    pub docker_image: Option<String>,
    /// `linux` (default) or `windows`.
    pub os: String,
    /// CPUs.
    pub cpus: Option<f64>,
    /// Memory in MB (Harbor's MB: MiB).
    pub memory_mb: Option<u64>,
    /// Disk in MB.
    pub storage_mb: Option<u64>,
    /// GPUs.
    pub gpus: Option<u32>,
    /// `public` (default), `no-network` or `allowlist`.
    pub network_mode: Option<String>,
    /// Environment variables of every command (`${VAR}` read from the host).
    pub env: BTreeMap<String, String>,
    /// The working directory of every command (default: the image's `WORKDIR`).
    pub workdir: Option<String>,
    /// Deprecated: memory as `"2G"`, `"512M"`, `"64K"` (read into `memory_mb`).
    pub memory: Option<String>,
    /// Deprecated: disk as `"10G"` (read into `storage_mb`).
    pub storage: Option<String>,
    /// Deprecated: `true` is `network_mode = "public"`, `false` `"no-network"`.
    pub allow_internet: Option<bool>,
}

impl Default for EnvironmentSection {
    fn default() -> Self {
        Self {
            build_timeout_sec: 600.0,
            docker_image: None,
            os: "linux".into(),
            cpus: None,
            memory_mb: None,
            storage_mb: None,
            gpus: None,
            network_mode: None,
            env: BTreeMap::new(),
            workdir: None,
            memory: None,
            storage: None,
            allow_internet: None,
        }
    }
}

impl EnvironmentSection {
    /// Memory in MiB: `memory_mb`, else the deprecated `memory`; both and different is an error.
    pub fn memory_mib(&self) -> Result<Option<u64>, String> {
        merge_size("memory", self.memory_mb, self.memory.as_deref())
    }

    /// Disk in MiB, as [`memory_mib`](Self::memory_mib).
    pub fn storage_mib(&self) -> Result<Option<u64>, String> {
        merge_size("storage", self.storage_mb, self.storage.as_deref())
    }

    /// The network mode: `network_mode`, else the deprecated `allow_internet`, else `public`.
    pub fn network(&self) -> &str {
        match (&self.network_mode, self.allow_internet) {
            (Some(mode), _) => mode,
            (None, Some(false)) => "no-network",
            _ => "public",
        }
    }
}

fn merge_size(key: &str, mb: Option<u64>, text: Option<&str>) -> Result<Option<u64>, String> {
    let parsed = match text {
        Some(t) => Some(size_mib(t).ok_or_else(|| {
            format!("[environment] {key} = {t:?}: expected a size such as \"2G\" or \"512M\"")
        })?),
        None => None,
    };
    match (mb, parsed) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "[environment] sets both {key}_mb = {a} and {key} = {:?} ({b} MB)",
            text.unwrap_or_default()
        )),
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}

/// `"2G"` → 2048, `"512M"` → 512, `"2048K"` → 2 (MiB, as Harbor reads the deprecated keys).
fn size_mib(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, factor) = match text.char_indices().last()? {
        (i, 'G' | 'g') => (&text[..i], 1024.0),
        (i, 'M' | 'm') => (&text[..i], 1.0),
        (i, 'K' | 'k') => (&text[..i], 1.0 / 1024.0),
        _ => (text, 1.0),
    };
    let value: f64 = number.trim().parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some((value * factor) as u64)
}

/// `[solution]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SolutionSection {
    /// Environment variables of `solve.sh`.
    pub env: BTreeMap<String, String>,
}

/// `value` with `${VAR}` and `${VAR:-default}` replaced from `lookup` (an unset `${VAR}`
/// without a default is an error naming it).
pub fn resolve_env(value: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed `${{` in {value:?}"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (lookup(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "{value:?} reads ${{{name}}}, which is not set on this host"
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harbor_defaults_and_deprecated_keys() {
        let cfg: TaskConfig = toml::from_str("").unwrap();
        assert_eq!(cfg.verifier.timeout_sec, 600.0);
        assert_eq!(cfg.environment.build_timeout_sec, 600.0);
        assert_eq!(cfg.agent.timeout_sec, None);
        assert_eq!(cfg.environment.network(), "public");
        let cfg: TaskConfig = toml::from_str(
            "version = \"1.0\"\nunknown = 3\n[environment]\nmemory = \"2G\"\nstorage = \"512M\"\nallow_internet = false\n[metadata]\ndifficulty = \"easy\"\n",
        )
        .unwrap();
        assert_eq!(cfg.schema_version.as_deref(), Some("1.0"));
        assert_eq!(cfg.environment.memory_mib(), Ok(Some(2048)));
        assert_eq!(cfg.environment.storage_mib(), Ok(Some(512)));
        assert_eq!(cfg.environment.network(), "no-network");
        assert_eq!(cfg.metadata["difficulty"], "easy");
        let both: TaskConfig =
            toml::from_str("[environment]\nmemory_mb = 100\nmemory = \"2G\"\n").unwrap();
        assert!(both.environment.memory_mib().is_err());
    }

    #[test]
    fn env_values_read_the_host() {
        let lookup = |name: &str| (name == "HOME").then(|| "/root".to_owned());
        assert_eq!(resolve_env("${HOME}/x", &lookup).unwrap(), "/root/x");
        assert_eq!(resolve_env("${NOPE:-d}", &lookup).unwrap(), "d");
        assert_eq!(resolve_env("plain", &lookup).unwrap(), "plain");
        assert!(resolve_env("${NOPE}", &lookup)
            .unwrap_err()
            .contains("NOPE"));
        assert!(resolve_env("${HOME", &lookup).is_err());
    }
}
