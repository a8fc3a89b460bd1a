//! A Harbor task directory, loaded and checked: what uniagent can run of it, and a typed error
//! naming the file for what it cannot.

use std::path::{Path, PathBuf};

use super::config::{EnvironmentSection, TaskConfig, VerifierMode};

/// Why a task directory cannot be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HarborTaskError {
    /// A file the format requires is missing or unreadable.
    #[error("{}: {message}", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `task.toml` does not parse or holds a bad value.
    #[error("{}: {message}", path.display())]
    BadConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A valid task using a part of the format uniagent does not run (yet).
    #[error("{}: {what} is not supported by uniagent", dir.display())]
    Unsupported {
        /// The task directory.
        dir: PathBuf,
        /// The feature.
        what: String,
    },
}

/// A loaded task.
#[derive(Debug, Clone, PartialEq)]
pub struct HarborTask {
    /// The task's directory.
    pub dir: PathBuf,
    /// Its name: `[task].name`, else the directory's name.
    pub name: String,
    /// What the agent is told: `instruction.md` without its leading canary lines.
    pub instruction: String,
    /// `task.toml`.
    pub config: TaskConfig,
}

impl HarborTask {
    /// Loads and checks the task in `dir`.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let err = uniagent_rewards::harbor::HarborTask::load(dir.path()).unwrap_err();
    /// assert!(err.to_string().contains("task.toml"));
    /// ```
    pub fn load(dir: &Path) -> Result<Self, HarborTaskError> {
        let config_path = dir.join("task.toml");
        let text = read(&config_path)?;
        let config: TaskConfig = toml::from_str(&text).map_err(|e| HarborTaskError::BadConfig {
            path: config_path.clone(),
            message: e.to_string(),
        })?;
        check_config(dir, &config_path, &config)?;
        check_files(dir, &config)?;
        let instruction_path = dir.join("instruction.md");
        let instruction = strip_canary(&read(&instruction_path)?);
        if instruction.trim().is_empty() {
            return Err(HarborTaskError::Missing {
                path: instruction_path,
                message: "empty: the agent would be told nothing".into(),
            });
        }
        let name = match &config.task {
            Some(task) if !task.name.is_empty() => task.name.clone(),
            _ => dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            name,
            instruction,
            config,
        })
    }

    /// The build context of the task's image (`environment/`).
    pub fn environment_dir(&self) -> PathBuf {
        self.dir.join("environment")
    }

    /// The directory uploaded to `/tests` for the verifier.
    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// Where the verifier runs: `[verifier] environment_mode`, else `separate` when
    /// `[verifier.environment]` is set, else `shared` (Harbor's rule).
    pub fn verifier_mode(&self) -> VerifierMode {
        verifier_mode(&self.config)
    }

    /// The environment the verifier runs in: `[verifier.environment]` in separate mode when
    /// set, else the task's `[environment]` (its variables, working directory and resources).
    pub fn verifier_environment(&self) -> &EnvironmentSection {
        match (&self.config.verifier.environment, self.verifier_mode()) {
            (Some(env), VerifierMode::Separate) => env,
            _ => &self.config.environment,
        }
    }

    /// The image of a separate verifier, by Harbor's precedence: `[verifier.environment]
    /// docker_image`, else one built from `tests/Dockerfile` (context `tests/`), else the
    /// task's own image. `None` in shared mode.
    pub fn verifier_image(&self) -> Option<VerifierImage> {
        if self.verifier_mode() != VerifierMode::Separate {
            return None;
        }
        let prebuilt = self
            .config
            .verifier
            .environment
            .as_ref()
            .and_then(|env| env.docker_image.clone());
        Some(match prebuilt {
            Some(image) => VerifierImage::Prebuilt(image),
            None if self.tests_dir().join("Dockerfile").is_file() => {
                VerifierImage::Build(self.tests_dir())
            }
            None => VerifierImage::TaskImage,
        })
    }

    /// `solution/solve.sh`, when the task has an oracle.
    pub fn solution_script(&self) -> Option<PathBuf> {
        let path = self.dir.join("solution/solve.sh");
        path.is_file().then_some(path)
    }
}

/// The image a separate verifier starts from ([`HarborTask::verifier_image`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifierImage {
    /// `[verifier.environment] docker_image`.
    Prebuilt(String),
    /// Built from this directory's `Dockerfile` (the task's `tests/`).
    Build(PathBuf),
    /// The agent's image.
    TaskImage,
}

/// A task directory's part of the format that uniagent does not run.
fn unsupported(dir: &Path, what: &str) -> HarborTaskError {
    HarborTaskError::Unsupported {
        dir: dir.to_path_buf(),
        what: what.to_owned(),
    }
}

/// The checks of `task.toml`'s values: what uniagent runs of them, and their ranges.
fn check_config(
    dir: &Path,
    config_path: &Path,
    config: &TaskConfig,
) -> Result<(), HarborTaskError> {
    let unsupported = |what: &str| unsupported(dir, what);
    if config.steps.is_some() {
        return Err(unsupported("a multi-step task ([[steps]])"));
    }
    if !config.environment.os.eq_ignore_ascii_case("linux") {
        return Err(unsupported(&format!(
            "[environment] os = {:?}",
            config.environment.os
        )));
    }
    let bad = |message: String| HarborTaskError::BadConfig {
        path: config_path.to_path_buf(),
        message,
    };
    let tables = [
        ("[environment]", Some(&config.environment)),
        (
            "[verifier.environment]",
            config.verifier.environment.as_ref(),
        ),
    ];
    for (table, env) in tables {
        let Some(env) = env else { continue };
        env.memory_mib().map_err(bad)?;
        env.storage_mib().map_err(bad)?;
        match env.network() {
            "public" | "no-network" => {}
            "allowlist" => {
                return Err(unsupported(&format!(
                    "{table} network_mode = \"allowlist\""
                )))
            }
            other => {
                return Err(bad(format!(
                    "{table} network_mode = {other:?}: expected \"public\", \"no-network\" \
                         or \"allowlist\""
                )))
            }
        }
        if let Some(cpus) = env.cpus.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(bad(format!(
                "{table} cpus = {cpus}: must be a positive number"
            )));
        }
    }
    for (name, value) in [
        ("[verifier] timeout_sec", Some(config.verifier.timeout_sec)),
        (
            "[environment] build_timeout_sec",
            Some(config.environment.build_timeout_sec),
        ),
        ("[agent] timeout_sec", config.agent.timeout_sec),
    ] {
        if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(bad(format!("{name} = {v}: must be a positive number")));
        }
    }
    if config.verifier.environment_mode == Some(VerifierMode::Shared)
        && config.verifier.environment.is_some()
    {
        return Err(bad(
            "[verifier] environment_mode = \"shared\" with a [verifier.environment]".into(),
        ));
    }
    if let Some(env) = &config.verifier.environment {
        if !env.os.eq_ignore_ascii_case("linux") {
            return Err(unsupported(&format!(
                "[verifier.environment] os = {:?}",
                env.os
            )));
        }
    }
    Ok(())
}

/// The files the task needs besides `task.toml`: its image's build context (or an image), the
/// verifier's script, and no docker-compose setup uniagent cannot run.
fn check_files(dir: &Path, config: &TaskConfig) -> Result<(), HarborTaskError> {
    let unsupported = |what: &str| unsupported(dir, what);
    let tests = dir.join("tests");
    if verifier_mode(config) == VerifierMode::Separate
        && !tests.join("Dockerfile").is_file()
        && tests.join("docker-compose.yaml").is_file()
    {
        return Err(unsupported("a docker-compose verifier environment"));
    }
    let environment = dir.join("environment");
    if config.environment.docker_image.is_none() && !environment.join("Dockerfile").is_file() {
        return Err(if environment.join("docker-compose.yaml").is_file() {
            unsupported("a docker-compose environment")
        } else {
            HarborTaskError::Missing {
                path: environment.join("Dockerfile"),
                message: "missing (or set [environment] docker_image)".into(),
            }
        });
    }
    let test = dir.join("tests/test.sh");
    if !test.is_file() {
        return Err(HarborTaskError::Missing {
            path: test,
            message: "missing: the verifier runs it".into(),
        });
    }
    Ok(())
}

fn verifier_mode(config: &TaskConfig) -> VerifierMode {
    match (
        config.verifier.environment_mode,
        &config.verifier.environment,
    ) {
        (Some(mode), _) => mode,
        (None, Some(_)) => VerifierMode::Separate,
        (None, None) => VerifierMode::Shared,
    }
}

fn read(path: &Path) -> Result<String, HarborTaskError> {
    std::fs::read_to_string(path).map_err(|e| HarborTaskError::Missing {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// `text` without its leading canary lines (an HTML or `#` comment mentioning "canary") and
/// the blank lines after them.
pub fn strip_canary(text: &str) -> String {
    let mut lines = text.split_inclusive('\n').peekable();
    let mut stripped = false;
    while let Some(line) = lines.peek() {
        let t = line.trim();
        let comment = t.starts_with('#') || (t.starts_with("<!--") && t.ends_with("-->"));
        if comment && t.to_ascii_lowercase().contains("canary") {
            stripped = true;
            lines.next();
        } else if stripped && t.is_empty() {
            lines.next();
        } else {
            break;
        }
    }
    lines.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const MINIMAL: [(&str, &str); 4] = [
        ("task.toml", "[verifier]\ntimeout_sec = 30.0\n"),
        (
            "instruction.md",
            "<!-- canary GUID 1234 -->\n\nCreate hello.txt.\n",
        ),
        ("environment/Dockerfile", "FROM base\nWORKDIR /app\n"),
        (
            "tests/test.sh",
            "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        ),
    ];

    #[test]
    fn a_minimal_task_loads_without_its_canary() {
        let dir = task(&MINIMAL);
        let t = HarborTask::load(dir.path()).unwrap();
        assert_eq!(t.instruction, "Create hello.txt.\n");
        assert_eq!(t.config.verifier.timeout_sec, 30.0);
        assert_eq!(t.solution_script(), None);
        assert_eq!(
            t.name,
            dir.path().file_name().unwrap().to_string_lossy().as_ref()
        );
    }

    #[test]
    fn each_missing_or_unsupported_part_is_named() {
        // (file dropped, file put instead, what the error names)
        type Case<'a> = (&'a str, Option<(&'a str, &'a str)>, &'a str);
        let cases: [Case<'_>; 8] = [
            ("tests/test.sh", None, "tests/test.sh"),
            (
                "instruction.md",
                Some(("instruction.md", "<!-- canary -->\n")),
                "empty",
            ),
            ("environment/Dockerfile", None, "environment/Dockerfile"),
            (
                "task.toml",
                Some(("task.toml", "[[steps]]\nname = \"a\"\n")),
                "multi-step",
            ),
            (
                "task.toml",
                Some(("task.toml", "[verifier.environment]\nos = \"windows\"\n")),
                "[verifier.environment] os",
            ),
            (
                "task.toml",
                Some(("task.toml", "[agent]\ntimeout_sec = -1.0\n")),
                "positive",
            ),
            (
                "task.toml",
                Some(("task.toml", "[environment]\nnetwork_mode = \"allowlist\"\n")),
                "network_mode = \"allowlist\" is not supported",
            ),
            (
                "task.toml",
                Some(("task.toml", "[environment]\nnetwork_mode = \"lan\"\n")),
                "expected \"public\"",
            ),
        ];
        for (drop, replace, needle) in cases {
            let mut files: Vec<(&str, &str)> = MINIMAL
                .iter()
                .copied()
                .filter(|(p, _)| *p != drop)
                .collect();
            files.extend(replace);
            let dir = task(&files);
            let err = HarborTask::load(dir.path()).unwrap_err().to_string();
            assert!(err.contains(needle), "{drop}: {err}");
        }
        // A prebuilt image needs no Dockerfile.
        let mut files: Vec<(&str, &str)> = MINIMAL
            .iter()
            .copied()
            .filter(|(p, _)| *p != "environment/Dockerfile" && *p != "task.toml")
            .collect();
        files.push(("task.toml", "[environment]\ndocker_image = \"img:1\"\n"));
        assert!(HarborTask::load(task(&files).path()).is_ok());
    }

    #[test]
    fn the_separate_verifiers_mode_environment_and_image_follow_harbors_precedence() {
        let with = |toml: &str, extra: &[(&'static str, &'static str)]| {
            let mut files: Vec<(&str, &str)> = MINIMAL
                .iter()
                .copied()
                .filter(|(p, _)| *p != "task.toml")
                .collect();
            files.push(("task.toml", toml));
            files.extend(extra.iter().copied());
            let dir = task(&files);
            let loaded = HarborTask::load(dir.path()).unwrap();
            (dir, loaded)
        };
        let (_d, shared) = with("", &[]);
        assert_eq!(shared.verifier_mode(), VerifierMode::Shared);
        assert_eq!(shared.verifier_image(), None);
        // Separate by its mode: the task's own image and environment.
        let (_d, own) = with(
            "[verifier]\nenvironment_mode = \"separate\"\n[environment]\ncpus = 2\n",
            &[],
        );
        assert_eq!(own.verifier_image(), Some(VerifierImage::TaskImage));
        assert_eq!(own.verifier_environment().cpus, Some(2.0));
        // ... by a [verifier.environment]: its resources; tests/Dockerfile is the image ...
        let (d, built) = with(
            "[verifier.environment]\nmemory_mb = 300\n",
            &[("tests/Dockerfile", "FROM base\n")],
        );
        assert_eq!(built.verifier_mode(), VerifierMode::Separate);
        assert_eq!(
            built.verifier_image(),
            Some(VerifierImage::Build(d.path().join("tests")))
        );
        assert_eq!(built.verifier_environment().memory_mib(), Ok(Some(300)));
        // ... unless its docker_image is set.
        let (_d, prebuilt) = with(
            "[verifier.environment]\ndocker_image = \"v:1\"\n",
            &[("tests/Dockerfile", "FROM base\n")],
        );
        assert_eq!(
            prebuilt.verifier_image(),
            Some(VerifierImage::Prebuilt("v:1".into()))
        );
        // A compose verifier is refused by name.
        let mut files: Vec<(&str, &str)> = MINIMAL
            .iter()
            .copied()
            .filter(|(p, _)| *p != "task.toml")
            .collect();
        files.push(("task.toml", "[verifier]\nenvironment_mode = \"separate\"\n"));
        files.push(("tests/docker-compose.yaml", "services: {}\n"));
        let err = HarborTask::load(task(&files).path()).unwrap_err();
        assert!(err.to_string().contains("docker-compose verifier"), "{err}");
    }

    #[test]
    fn only_leading_canary_comments_go() {
        assert_eq!(
            strip_canary("# Canary: abc\n\n\nDo it.\n# canary"),
            "Do it.\n# canary"
        );
        assert_eq!(strip_canary("# Title\nDo it."), "# Title\nDo it.");
        assert_eq!(strip_canary("Do it."), "Do it.");
    }
}
