//! [`RewardError`]: why a reward could not be computed.

use uniagent_core::ErrorKind;

/// Why a reward could not be computed.
///
/// A wrong answer or failing tests are **not** errors (they score 0); these are the cases where
/// no score can be given at all: the task lacks what the reward needs, or the sandbox failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RewardError {
    /// The task's metadata lacks a field the reward reads.
    #[error("task metadata has no `{field}`")]
    MissingMetadata {
        /// The field's name.
        field: String,
    },
    /// A metadata field has the wrong shape.
    #[error("task metadata `{field}` is malformed: {message}")]
    BadMetadata {
        /// The field's name.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The reward runs commands in the sandbox, and the rollout had none.
    #[error("this reward runs in the task's sandbox, and the rollout has none")]
    NoSandbox,
    /// A preparation step (applying the test patch, restoring test files) failed in the sandbox.
    #[error("{step} failed (exit code {exit_code:?}): {output}")]
    SetupFailed {
        /// The step, in words.
        step: String,
        /// Its exit code, when it ran to the end.
        exit_code: Option<i32>,
        /// Its output (tail).
        output: String,
    },
    /// The reward's own configuration is unusable (a timeout set by the builder that the
    /// loader would have refused).
    #[error("bad reward configuration: {message}")]
    BadConfig {
        /// What is wrong.
        message: String,
    },
    /// No parser of the `swebench` package has this name.
    #[error("unknown log parser `{name}` (Python parsers: {known})")]
    UnknownParser {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// The name is one of the package's non-Python parsers, which are not ported.
    #[error(
        "log parser `{name}` is a non-Python parser of the swebench package and is not supported"
    )]
    UnsupportedParser {
        /// The name asked for.
        name: String,
    },
    /// The package's parser raises on this log (so does this port).
    #[error("log parser `{parser}` failed on this log: {message}")]
    ParserFailed {
        /// The parser.
        parser: String,
        /// What went wrong.
        message: String,
    },
    /// A Harbor verifier gave no reward: it ran past its timeout, wrote no reward file or a
    /// malformed one (an infrastructure failure of the task, not a score of 0).
    #[error("the task's verifier gave no reward: {message}")]
    VerifierFailed {
        /// What happened.
        message: String,
    },
    /// The sandbox itself failed (unreachable, died, protocol error).
    #[error(transparent)]
    Sandbox(#[from] uniagent_core::Error),
}

impl RewardError {
    /// The broad class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::MissingMetadata { .. }
            | Self::BadMetadata { .. }
            | Self::UnknownParser { .. }
            | Self::ParserFailed { .. } => ErrorKind::InvalidInput,
            Self::UnsupportedParser { .. } => ErrorKind::NotSupported,
            Self::NoSandbox | Self::BadConfig { .. } => ErrorKind::Config,
            Self::SetupFailed { .. } | Self::VerifierFailed { .. } => ErrorKind::CommandFailed,
            Self::Sandbox(e) => e.kind(),
        }
    }

    /// Whether scoring again may succeed (only transient sandbox failures).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Sandbox(e) if e.is_retryable())
    }

    /// The core error a [`RewardSpec`](uniagent_core::RewardSpec) returns: sandbox errors pass
    /// through unchanged (their kind and retryability matter to the caller); the rest become
    /// [`uniagent_core::Error::Reward`] naming the reward.
    pub fn into_core(self, reward: &str) -> uniagent_core::Error {
        match self {
            Self::Sandbox(e) => e,
            other => uniagent_core::Error::Reward {
                reward: reward.to_owned(),
                message: other.to_string(),
                source: Some(Box::new(other)),
            },
        }
    }
}

/// Keeps the last `max` bytes of `text` (on a char boundary), marking the cut.
pub(crate) fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[... {start} bytes cut ...]{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_retryability() {
        let missing = RewardError::MissingMetadata {
            field: "answer".into(),
        };
        assert_eq!(missing.kind(), ErrorKind::InvalidInput);
        assert!(!missing.is_retryable());
        let core = missing.into_core("em");
        assert_eq!(core.kind(), ErrorKind::Internal);
        assert!(core.to_string().contains("reward `em` failed"), "{core}");
        assert!(core.to_string().contains("`answer`"), "{core}");

        let transient = uniagent_core::Error::Sandbox {
            backend: "host".into(),
            message: "connection refused".into(),
            retryable: true,
            source: None,
        };
        let wrapped = RewardError::from(transient);
        assert!(wrapped.is_retryable());
        assert_eq!(wrapped.kind(), ErrorKind::Unavailable);
        assert!(wrapped.into_core("tests").is_retryable());
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("short", 10), "short");
        let cut = tail("ééééé", 3);
        assert!(cut.ends_with('é'), "{cut}");
        assert!(cut.starts_with("[... "), "{cut}");
    }
}
