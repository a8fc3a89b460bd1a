//! [`EnvError`]: every way loading a configuration, its tasks and its environment, and running
//! them, can fail, and the exit code a command gives each one.
//!
//! The split is the exit-code contract of the `uniagent` command (its `docs/cli.md`), which
//! reports this type as its own: bad usage or bad input (config, dataset, missing image,
//! unreachable model) exits 2 before anything starts; a failure while running exits 1.

use std::fmt;

/// Result alias of this crate.
pub type Result<T, E = EnvError> = std::result::Result<T, E>;

/// The broad class of an [`EnvError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration file or a `--set` override is wrong.
    Config,
    /// The dataset cannot be read or a row lacks what its layout needs.
    Dataset,
    /// Something the run needs is missing before it starts (an image, a model endpoint, a
    /// binary).
    Preflight,
    /// A failure while running (output directory, sandbox infrastructure, interrupted run).
    Runtime,
}

/// An error of the `uniagent` command, with a one-line message that names what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// A bad config value; `origin` is `file:line` or `--set KEY`, `path` the dotted key.
    #[error("{origin}: {}{message}", path_prefix(.path))]
    Config {
        /// Where the value came from (`run.yaml:12`, `--set loop.max_turns`).
        origin: String,
        /// Dotted key path (`loop.max_turns`), empty when the whole file is wrong.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A dataset problem; `row` is 1-based.
    #[error("{file}{}: {message}", row_suffix(*.row))]
    Dataset {
        /// The dataset file.
        file: String,
        /// The row (1-based), when one row is at fault.
        row: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A missing prerequisite found before any sandbox started.
    #[error("{0}")]
    Preflight(String),
    /// A failure while running.
    #[error("{0}")]
    Runtime(String),
    /// The run was interrupted (Ctrl-C); finished rollouts are kept.
    #[error("interrupted: {0}")]
    Interrupted(String),
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() || path == "." {
        String::new()
    } else {
        format!("`{path}`: ")
    }
}

fn row_suffix(row: Option<usize>) -> String {
    row.map(|r| format!(" row {r}")).unwrap_or_default()
}

impl EnvError {
    /// The class of the error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Config { .. } => ErrorKind::Config,
            Self::Dataset { .. } => ErrorKind::Dataset,
            Self::Preflight(_) => ErrorKind::Preflight,
            Self::Runtime(_) | Self::Interrupted(_) => ErrorKind::Runtime,
        }
    }

    /// Whether running the same command again may succeed without changing anything (a
    /// runtime failure or an interrupted run, which resumes).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Runtime(_) | Self::Interrupted(_))
    }

    /// The process exit code: 2 for bad input, 1 for a failure while running.
    pub fn exit_code(&self) -> u8 {
        match self.kind() {
            ErrorKind::Config | ErrorKind::Dataset | ErrorKind::Preflight => 2,
            ErrorKind::Runtime => 1,
        }
    }

    /// A config error at `origin` for key `path`.
    pub fn config(
        origin: impl Into<String>,
        path: impl Into<String>,
        message: impl fmt::Display,
    ) -> Self {
        // The origin can be a `--set` text and the path a key from the file: either may hold
        // a line break, and the error stays one line.
        Self::Config {
            origin: one_line(&origin.into()),
            path: one_line(&path.into()),
            message: one_line(&message.to_string()),
        }
    }

    /// A dataset error in `file` at 1-based `row`.
    pub fn dataset(
        file: impl fmt::Display,
        row: Option<usize>,
        message: impl fmt::Display,
    ) -> Self {
        Self::Dataset {
            file: file.to_string(),
            row,
            message: one_line(&message.to_string()),
        }
    }

    /// A missing prerequisite.
    pub fn preflight(message: impl fmt::Display) -> Self {
        Self::Preflight(one_line(&message.to_string()))
    }

    /// A failure while running.
    pub fn runtime(message: impl fmt::Display) -> Self {
        Self::Runtime(one_line(&message.to_string()))
    }
}

/// Joins a multi-line message into one line (the error contract is one line on stderr).
pub fn one_line(text: &str) -> String {
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_codes_follow_the_kind() {
        let e = EnvError::config(
            "run.yaml:3",
            "loop.max_turns",
            "invalid type\n  expected u32",
        );
        assert_eq!(
            e.to_string(),
            "run.yaml:3: `loop.max_turns`: invalid type expected u32"
        );
        assert_eq!(e.exit_code(), 2);
        let e = EnvError::dataset("tasks.jsonl", Some(4), "missing field `base_commit`");
        assert_eq!(
            e.to_string(),
            "tasks.jsonl row 4: missing field `base_commit`"
        );
        assert_eq!(EnvError::runtime("disk full").exit_code(), 1);
        assert!(EnvError::Interrupted("x".into()).is_retryable());
        assert!(!EnvError::preflight("no image").is_retryable());
    }

    #[test]
    fn an_override_with_line_breaks_still_gives_one_line() {
        // Found by the run_config fuzz target: `--set` text echoed as the origin.
        let doc = crate::config::ConfigDoc::from_text(
            std::path::Path::new("run.yaml"),
            "tasks: {}\n".into(),
            uniagent_core::config::ConfigFormat::Yaml,
            &["loop.max_turns=x\n# y".into()],
        )
        .unwrap();
        let e = doc.error_at(&["loop".into(), "max_turns".into()], "invalid type");
        assert!(!e.to_string().contains('\n'), "{e}");
        assert!(e.to_string().contains("--set loop.max_turns=x # y"), "{e}");
    }
}
