//! The one error type of the RL numerics.

/// What can go wrong in the RL numerics: bad shapes, bad configuration or names, and statistics
/// that are undefined for the given mask (the cases where verl raises).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RlError {
    /// A tensor has the wrong shape.
    #[error("{what}: expected shape {expected:?}, got {got:?}")]
    Shape {
        /// Which argument.
        what: &'static str,
        /// The shape it must have (`-1` = any size).
        expected: Vec<i64>,
        /// The shape it has.
        got: Vec<i64>,
    },
    /// A configuration value is out of its domain (e.g. `clip_ratio_c <= 1`).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An unknown name for an estimator, a loss mode or an aggregation mode.
    #[error("unknown {kind} {name:?}")]
    UnknownName {
        /// What kind of name (`"KL estimator"`, `"loss aggregation mode"`, ...).
        kind: &'static str,
        /// The name given.
        name: String,
    },
    /// A statistic is undefined for this mask (verl raises too): the unbiased masked variance
    /// needs at least two mask-1 tokens.
    #[error("masked variance needs at least 2 mask-1 tokens, got {tokens}")]
    TooFewTokens {
        /// The number of mask-1 tokens.
        tokens: i64,
    },
    /// The input batch (e.g. the `rl_numerics` JSON) is malformed.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

impl RlError {
    /// The broad class of this error.
    pub fn kind(&self) -> uniagent_core::ErrorKind {
        use uniagent_core::ErrorKind;
        match self {
            Self::Shape { .. } | Self::TooFewTokens { .. } | Self::InvalidBatch(_) => {
                ErrorKind::InvalidInput
            }
            Self::InvalidConfig(_) | Self::UnknownName { .. } => ErrorKind::Config,
            Self::Torch(_) => ErrorKind::Internal,
        }
    }

    /// Never: the numerics are deterministic, so the same input fails the same way again.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// Result of the RL numerics.
pub type RlResult<T> = Result<T, RlError>;

/// Checks that `t` has exactly `expected` as its shape.
pub(crate) fn expect_shape(what: &'static str, t: &tch::Tensor, expected: &[i64]) -> RlResult<()> {
    let got = t.size();
    if got == expected {
        Ok(())
    } else {
        Err(RlError::Shape {
            what,
            expected: expected.to_vec(),
            got,
        })
    }
}

/// Checks that `t` is 2-D and returns `[rows, cols]`.
pub(crate) fn expect_2d(what: &'static str, t: &tch::Tensor) -> RlResult<[i64; 2]> {
    match t.size().as_slice() {
        [b, n] => Ok([*b, *n]),
        got => Err(RlError::Shape {
            what,
            expected: vec![-1, -1],
            got: got.to_vec(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uniagent_core::ErrorKind;

    #[test]
    fn kinds_follow_the_cause() {
        let shape = RlError::Shape {
            what: "advantages",
            expected: vec![2, 3],
            got: vec![3],
        };
        assert_eq!(shape.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            RlError::InvalidConfig("clip".into()).kind(),
            ErrorKind::Config
        );
        let unknown = RlError::UnknownName {
            kind: "KL estimator",
            name: "k9".into(),
        };
        assert_eq!(unknown.kind(), ErrorKind::Config);
        assert!(!unknown.is_retryable());
    }
}
