//! `tasks: {harbor: DIR}`: Harbor task directories as tasks. Each task's metadata carries what
//! the `harbor` environment needs: its directory, the image (built from `environment/` under a
//! tag hashing its content, or `[environment] docker_image`), the working directory, the
//! timeouts; the prompt is its instruction (the `{{ instruction }}` template by default).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use uniagent_core::{Task, TIME_LIMIT_FIELD};
use uniagent_rewards::harbor::{EnvironmentSection, HarborTask, VerifierImage, HARBOR_DIR_FIELD};
use uniagent_sandboxes::SandboxLimits;

use super::PromptTemplate;
use crate::env::SANDBOX_LIMITS_FIELD;
use crate::error::{EnvError, Result};

/// The task metadata field holding a separate verifier's image.
pub const VERIFIER_IMAGE_FIELD: &str = "verifier_image";

/// The task metadata field saying the verifier's image is built from the task's `tests/`.
pub const BUILD_VERIFIER_IMAGE_FIELD: &str = "build_verifier_image";

/// The task metadata field holding a separate verifier's sandbox limits (as
/// [`SANDBOX_LIMITS_FIELD`] for the agent's).
pub const VERIFIER_LIMITS_FIELD: &str = "verifier_sandbox_limits";

/// The default prompt of a Harbor task: its instruction as it is.
pub const HARBOR_TEMPLATE: &str = "{{ instruction }}";

/// `tasks.harbor`: a task directory, a directory of task directories, or a list of either.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HarborDirs {
    /// One directory.
    One(PathBuf),
    /// Several.
    Many(Vec<PathBuf>),
}

impl HarborDirs {
    /// The directories named.
    pub fn dirs(&self) -> Vec<PathBuf> {
        match self {
            Self::One(p) => vec![p.clone()],
            Self::Many(ps) => ps.clone(),
        }
    }

    /// Each directory resolved against `base`.
    pub fn resolved(&self, base: &Path) -> Self {
        Self::Many(
            self.dirs()
                .iter()
                .map(|p| crate::config::resolve(base, p))
                .collect(),
        )
    }
}

/// The task directories under `dirs`, in order (each directory's tasks sorted by name).
pub fn task_dirs(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for dir in dirs {
        if dir.join("task.toml").is_file() {
            found.push(dir.clone());
            continue;
        }
        let entries = std::fs::read_dir(dir).map_err(|e| {
            EnvError::dataset(
                dir.display(),
                None,
                format!("not a Harbor task or dataset directory: {e}"),
            )
        })?;
        let mut tasks: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("task.toml").is_file())
            .collect();
        if tasks.is_empty() {
            return Err(EnvError::dataset(
                dir.display(),
                None,
                "holds no Harbor task (no task.toml in it or in its subdirectories)",
            ));
        }
        tasks.sort();
        found.extend(tasks);
    }
    Ok(found)
}

/// The tasks of `dirs` (at most `limit`), prompted through `template` (default
/// [`HARBOR_TEMPLATE`]).
pub fn load_harbor_tasks(
    dirs: &[PathBuf],
    template: Option<&str>,
    system: Option<&str>,
    limit: Option<usize>,
) -> Result<Vec<Task>> {
    let template = PromptTemplate::new(template.unwrap_or(HARBOR_TEMPLATE), system)?;
    let mut tasks: Vec<Task> = Vec::new();
    for dir in task_dirs(dirs)?
        .into_iter()
        .take(limit.unwrap_or(usize::MAX))
    {
        let bad = |m: String| EnvError::dataset(dir.display(), None, m);
        let task = HarborTask::load(&dir).map_err(|e| bad(e.to_string()))?;
        let metadata = metadata(&task).map_err(bad)?;
        let messages = template.render(&task.name, &metadata).map_err(bad)?;
        if tasks.iter().any(|t| t.id == task.name) {
            return Err(bad(format!("duplicate task name `{}`", task.name)));
        }
        let mut t = Task::new(task.name.clone(), messages);
        t.metadata = metadata;
        tasks.push(t);
    }
    Ok(tasks)
}

/// What the `harbor` environment reads of a task.
fn metadata(task: &HarborTask) -> std::result::Result<Map<String, Value>, String> {
    let dir = task
        .dir
        .canonicalize()
        .map_err(|e| format!("resolving the task directory: {e}"))?;
    let env = &task.config.environment;
    let mut m = Map::new();
    m.insert(HARBOR_DIR_FIELD.into(), json!(dir));
    m.insert("instruction".into(), json!(task.instruction));
    m.insert("name".into(), json!(task.name));
    m.insert("image".into(), json!(image_tag(task)?));
    m.insert("build_image".into(), json!(env.docker_image.is_none()));
    m.insert("workdir".into(), json!(workdir(task)));
    m.insert("build_timeout_sec".into(), json!(env.build_timeout_sec));
    // `[agent] timeout_sec` bounds the rollout (the loop takes the smaller of it and
    // `loop.wall_clock_budget`).
    m.insert(
        TIME_LIMIT_FIELD.into(),
        json!(task.config.agent.timeout_sec),
    );
    let limits = sandbox_limits(env)?;
    if !limits.is_empty() {
        m.insert(
            SANDBOX_LIMITS_FIELD.into(),
            serde_json::to_value(limits).map_err(|e| e.to_string())?,
        );
    }
    // A separate verifier: its image (built here from `tests/` when that is its source) and
    // its own limits.
    if let Some(source) = task.verifier_image() {
        let (image, build) = match source {
            VerifierImage::Prebuilt(image) => (image, false),
            VerifierImage::Build(context) => (context_tag(task, &context, "-verifier")?, true),
            VerifierImage::TaskImage => (image_tag(task)?, false),
        };
        m.insert(VERIFIER_IMAGE_FIELD.into(), json!(image));
        m.insert(BUILD_VERIFIER_IMAGE_FIELD.into(), json!(build));
        let limits = sandbox_limits(task.verifier_environment())?;
        if !limits.is_empty() {
            m.insert(
                VERIFIER_LIMITS_FIELD.into(),
                serde_json::to_value(limits).map_err(|e| e.to_string())?,
            );
        }
    }
    m.insert(
        "verifier_timeout_sec".into(),
        json!(task.config.verifier.timeout_sec),
    );
    m.insert(
        "task_metadata".into(),
        Value::Object(task.config.metadata.clone()),
    );
    Ok(m)
}

/// The limits an `[environment]` table sets: `cpus`, `memory_mb` (or the deprecated `memory`),
/// `network_mode = "no-network"` (or `allow_internet = false`). "public" leaves the configured
/// network alone.
fn sandbox_limits(env: &EnvironmentSection) -> std::result::Result<SandboxLimits, String> {
    Ok(SandboxLimits {
        cpus: env.cpus,
        memory_bytes: env.memory_mib()?.map(|mib| mib << 20),
        no_network: env.network() == "no-network",
    })
}

/// `[environment] docker_image`, else `uniagent-harbor/NAME:HASH` with HASH over the build
/// context's files (paths and bytes), so an edited Dockerfile builds a new image.
fn image_tag(task: &HarborTask) -> std::result::Result<String, String> {
    if let Some(image) = &task.config.environment.docker_image {
        return Ok(image.clone());
    }
    context_tag(task, &task.environment_dir(), "")
}

/// `uniagent-harbor/NAME{suffix}:HASH` for the build context `context`.
fn context_tag(
    task: &HarborTask,
    context: &Path,
    suffix: &str,
) -> std::result::Result<String, String> {
    let context = context.to_path_buf();
    let mut files = Vec::new();
    let mut pending = vec![context.clone()];
    while let Some(at) = pending.pop() {
        let entries =
            std::fs::read_dir(&at).map_err(|e| format!("reading {}: {e}", at.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("reading {}: {e}", at.display()))?
                .path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    // FNV-1a, 64 bits: stable across runs and machines.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for file in &files {
        let relative = file.strip_prefix(&context).unwrap_or(file);
        feed(relative.to_string_lossy().as_bytes());
        feed(&[0]);
        feed(&std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display()))?);
        feed(&[0]);
    }
    let name: String = task
        .name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    Ok(format!(
        "uniagent-harbor/{}{suffix}:{hash:016x}",
        name.trim_matches('-')
    ))
}

/// `[environment] workdir`, else the Dockerfile's last absolute `WORKDIR`, else `/`.
fn workdir(task: &HarborTask) -> String {
    if let Some(dir) = &task.config.environment.workdir {
        return dir.clone();
    }
    let dockerfile =
        std::fs::read_to_string(task.environment_dir().join("Dockerfile")).unwrap_or_default();
    dockerfile
        .lines()
        .rev()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            let keyword = words.next()?;
            let dir = words.next()?;
            (keyword.eq_ignore_ascii_case("WORKDIR") && dir.starts_with('/'))
                .then(|| dir.to_owned())
        })
        .unwrap_or_else(|| "/".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_task(root: &Path, name: &str, dockerfile: &str) {
        let files = [
            (
                "task.toml",
                "[metadata]\ncategory = \"files\"\n[agent]\ntimeout_sec = 120.0\n",
            ),
            ("instruction.md", "Create hello.txt.\n"),
            ("environment/Dockerfile", dockerfile),
            (
                "tests/test.sh",
                "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
            ),
        ];
        for (path, text) in files {
            let path = root.join(name).join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn a_dataset_directory_becomes_tasks_with_their_image_and_workdir() {
        let root = tempfile::tempdir().unwrap();
        write_task(root.path(), "b-task", "FROM base:1\nWORKDIR /app\n");
        write_task(root.path(), "a-task", "FROM base:1\n");
        std::fs::create_dir(root.path().join("not-a-task")).unwrap();
        let tasks = load_harbor_tasks(&[root.path().to_path_buf()], None, None, None).unwrap();
        let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["a-task", "b-task"]);
        assert_eq!(tasks[0].messages[0].text(), "Create hello.txt.\n");
        assert_eq!(tasks[0].metadata["workdir"], "/");
        assert_eq!(tasks[1].metadata["workdir"], "/app");
        assert_eq!(tasks[0].metadata["task_metadata"]["category"], "files");
        // No limits of its own: the configured ones stay.
        assert!(tasks[0].metadata.get(SANDBOX_LIMITS_FIELD).is_none());
        // `[agent] timeout_sec` is the rollout's own wall-clock limit.
        assert_eq!(
            tasks[0].time_limit(),
            Ok(Some(std::time::Duration::from_secs(120)))
        );
        let image = tasks[1].metadata["image"].as_str().unwrap().to_owned();
        assert!(image.starts_with("uniagent-harbor/b-task:"), "{image}");
        // The tag follows the build context's content.
        write_task(root.path(), "b-task", "FROM base:2\nWORKDIR /app\n");
        let again = load_harbor_tasks(&[root.path().join("b-task")], None, None, None).unwrap();
        assert_ne!(again[0].metadata["image"], image);
        assert_eq!(
            load_harbor_tasks(&[root.path().to_path_buf()], None, None, Some(1))
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn the_environment_tables_resources_become_sandbox_limits() {
        let root = tempfile::tempdir().unwrap();
        write_task(root.path(), "t", "FROM base:1\n");
        std::fs::write(
            root.path().join("t/task.toml"),
            "[environment]\ncpus = 0.5\nmemory = \"300M\"\nnetwork_mode = \"no-network\"\n",
        )
        .unwrap();
        let tasks = load_harbor_tasks(&[root.path().to_path_buf()], None, None, None).unwrap();
        assert_eq!(
            tasks[0].metadata[SANDBOX_LIMITS_FIELD],
            json!({"cpus": 0.5, "memory_bytes": 300u64 << 20, "no_network": true})
        );
        assert_eq!(tasks[0].time_limit(), Ok(None));
        // `allowlist` cannot be honoured: refused at load, naming the task.
        std::fs::write(
            root.path().join("t/task.toml"),
            "[environment]\nnetwork_mode = \"allowlist\"\n",
        )
        .unwrap();
        let err = load_harbor_tasks(&[root.path().to_path_buf()], None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("allowlist") && err.contains("/t"), "{err}");
    }

    #[test]
    fn a_separate_verifier_gets_its_image_and_limits() {
        let root = tempfile::tempdir().unwrap();
        write_task(root.path(), "t", "FROM base:1\n");
        let toml = root.path().join("t/task.toml");
        std::fs::write(&toml, "[verifier]\nenvironment_mode = \"separate\"\n").unwrap();
        let load = || load_harbor_tasks(&[root.path().to_path_buf()], None, None, None).unwrap();
        let own = load();
        // The task's own image, built once as the agent's.
        assert_eq!(
            own[0].metadata[VERIFIER_IMAGE_FIELD],
            own[0].metadata["image"]
        );
        assert_eq!(own[0].metadata[BUILD_VERIFIER_IMAGE_FIELD], false);
        assert!(own[0].metadata.get(VERIFIER_LIMITS_FIELD).is_none());
        // tests/Dockerfile: an image of its own, with [verifier.environment]'s limits.
        std::fs::write(root.path().join("t/tests/Dockerfile"), "FROM base:1\n").unwrap();
        std::fs::write(&toml, "[verifier.environment]\ncpus = 2\n").unwrap();
        let built = load();
        let image = built[0].metadata[VERIFIER_IMAGE_FIELD].as_str().unwrap();
        assert!(image.starts_with("uniagent-harbor/t-verifier:"), "{image}");
        assert_eq!(built[0].metadata[BUILD_VERIFIER_IMAGE_FIELD], true);
        assert_eq!(
            built[0].metadata[VERIFIER_LIMITS_FIELD],
            json!({"cpus": 2.0, "memory_bytes": null, "no_network": false})
        );
        // A shared verifier has none of these.
        std::fs::write(&toml, "").unwrap();
        assert!(load()[0].metadata.get(VERIFIER_IMAGE_FIELD).is_none());
    }

    #[test]
    fn a_directory_without_tasks_or_a_broken_task_is_named() {
        let root = tempfile::tempdir().unwrap();
        let err = load_harbor_tasks(&[root.path().to_path_buf()], None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds no Harbor task"), "{err}");
        write_task(root.path(), "t", "FROM base:1\n");
        std::fs::remove_file(root.path().join("t/tests/test.sh")).unwrap();
        let err = load_harbor_tasks(&[root.path().to_path_buf()], None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("tests/test.sh"), "{err}");
    }
}
