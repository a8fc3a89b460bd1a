//! Exponential backoff with jitter, shared by every backend.
//!
//! Only errors for which [`Error::is_retryable`] is true are retried; anything else is returned
//! at once. When attempts or time run out the last error is wrapped in
//! [`Error::RetriesExhausted`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How a backend retries transient failures.
///
/// ```
/// use std::time::Duration;
/// use uniagent_core::RetryConfig;
///
/// let cfg = RetryConfig { max_attempts: 4, ..RetryConfig::default() };
/// // Delays before attempts 2, 3 and 4 grow exponentially (before jitter) and are capped.
/// assert_eq!(cfg.base_delay(1), Duration::from_millis(100));
/// assert_eq!(cfg.base_delay(2), Duration::from_millis(200));
/// assert!(cfg.base_delay(30) <= cfg.max_backoff);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Attempts in total, including the first. `1` disables retrying.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    #[serde(with = "duration_secs")]
    pub initial_backoff: Duration,
    /// Upper bound of one delay.
    #[serde(with = "duration_secs")]
    pub max_backoff: Duration,
    /// Growth factor between consecutive delays (finite, at least 1).
    #[serde(deserialize_with = "multiplier_range")]
    pub multiplier: f64,
    /// Fraction of each delay that is randomised: a delay `d` becomes uniform in
    /// `[d * (1 - jitter), d]`. `0.0` gives deterministic delays. Must lie in `[0, 1]`.
    #[serde(deserialize_with = "unit_fraction")]
    pub jitter: f64,
    /// No new attempt starts after this much time has passed since the first one.
    #[serde(with = "duration_secs")]
    pub max_elapsed: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: 0.5,
            max_elapsed: Duration::from_secs(120),
        }
    }
}

impl RetryConfig {
    /// A configuration that never retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The delay after failed attempt number `attempt` (1-based), before jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(64) as i32;
        let secs = self.initial_backoff.as_secs_f64() * self.multiplier.max(1.0).powi(exp);
        let capped = secs.min(self.max_backoff.as_secs_f64());
        Duration::from_secs_f64(capped.max(0.0))
    }

    /// The delay after failed attempt number `attempt`, with jitter applied. A configuration
    /// built in code with a NaN jitter or multiplier gets no jitter / no growth instead of a
    /// panic ([`RetryConfig::validate`] reports such values).
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.base_delay(attempt).as_secs_f64();
        let jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        let factor = 1.0 - jitter * fastrand::f64();
        Duration::try_from_secs_f64(base * factor).unwrap_or(self.max_backoff)
    }

    /// Checks every field: at least one attempt, `multiplier` finite and `>= 1`, `jitter` in
    /// `[0, 1]`, `initial_backoff <= max_backoff`. Loading a configuration file applies the
    /// same rules to the numbers (a NaN jitter made the first retry panic).
    ///
    /// ```
    /// use uniagent_core::RetryConfig;
    /// assert!(RetryConfig::default().validate().is_ok());
    /// assert!(RetryConfig { jitter: f64::NAN, ..RetryConfig::default() }.validate().is_err());
    /// assert!(uniagent_core::config::parse::<RetryConfig>("jitter: .nan", uniagent_core::config::ConfigFormat::Yaml).is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| {
            Err(Error::Config {
                message,
                source: None,
            })
        };
        if self.max_attempts == 0 {
            return bad("retry.max_attempts must be >= 1, got 0".into());
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return bad(format!(
                "retry.multiplier must be finite and >= 1, got {}",
                self.multiplier
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return bad(format!(
                "retry.jitter must lie in [0, 1], got {}",
                self.jitter
            ));
        }
        if self.initial_backoff > self.max_backoff {
            return bad(format!(
                "retry.initial_backoff ({:?}) must not exceed retry.max_backoff ({:?})",
                self.initial_backoff, self.max_backoff
            ));
        }
        Ok(())
    }

    /// Runs `op` until it succeeds, fails with a non-retryable error, or the budget is spent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use uniagent_core::{Error, RetryConfig};
    ///
    /// let calls = AtomicU32::new(0);
    /// let cfg = RetryConfig { initial_backoff: Duration::from_millis(1), ..RetryConfig::default() };
    /// let out = cfg
    ///     .retry(|| async {
    ///         if calls.fetch_add(1, Ordering::SeqCst) < 2 {
    ///             Err(Error::Sandbox {
    ///                 backend: "remote".into(),
    ///                 message: "connection reset".into(),
    ///                 retryable: true,
    ///                 source: None,
    ///             })
    ///         } else {
    ///             Ok(42)
    ///         }
    ///     })
    ///     .await;
    /// assert_eq!(out.unwrap(), 42);
    /// assert_eq!(calls.load(Ordering::SeqCst), 3);
    /// # }
    /// ```
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let start = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let err = match op().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if !err.is_retryable() {
                return Err(err);
            }
            let delay = self.delay(attempt);
            let out_of_attempts = attempt >= self.max_attempts.max(1);
            let out_of_time = start.elapsed() + delay >= self.max_elapsed;
            if out_of_attempts || out_of_time {
                return Err(Error::RetriesExhausted {
                    attempts: attempt,
                    elapsed: start.elapsed(),
                    last: Box::new(err),
                });
            }
            tracing::debug!(attempt, ?delay, error = %err, "retrying after transient error");
            tokio::time::sleep(delay).await;
        }
    }
}

fn unit_fraction<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    let x = f64::deserialize(d)?;
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(serde::de::Error::custom(format!(
            "invalid jitter {x}: must lie in [0, 1]"
        )))
    }
}

fn multiplier_range<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    let x = f64::deserialize(d)?;
    if x.is_finite() && x >= 1.0 {
        Ok(x)
    } else {
        Err(serde::de::Error::custom(format!(
            "invalid multiplier {x}: must be finite and >= 1"
        )))
    }
}

/// Serde helper: a [`Duration`] written as (fractional) seconds, like SWE-ReX and most configs.
pub mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes seconds as a float.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    /// Reads non-negative, finite seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(|_| {
            serde::de::Error::custom(format!(
                "invalid duration {secs} s: must be finite and >= 0"
            ))
        })
    }
}

/// Serde helper for `Option<Duration>` written as seconds or `null`.
pub mod opt_duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes seconds as a float, or `null`.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    /// Reads non-negative, finite seconds or `null`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(secs) => Duration::try_from_secs_f64(secs).map(Some).map_err(|_| {
                serde::de::Error::custom(format!(
                    "invalid duration {secs} s: must be finite and >= 0"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn transient() -> Error {
        Error::Model {
            backend: "t".into(),
            message: "503".into(),
            retryable: true,
            source: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_max_attempts_and_wraps_last_error() {
        let calls = AtomicU32::new(0);
        let cfg = RetryConfig {
            max_attempts: 3,
            ..RetryConfig::default()
        };
        let err = cfg
            .retry(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(transient())
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        match err {
            Error::RetriesExhausted { attempts, .. } => assert_eq!(attempts, 3),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn non_retryable_errors_return_at_once() {
        let calls = AtomicU32::new(0);
        let err = RetryConfig::default()
            .retry(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Error::invalid_input("bad"))
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(matches!(err, Error::InvalidInput { .. }));
    }

    /// How many times `cfg` calls an operation that always fails with a transient error.
    async fn attempts_on_transient_errors(cfg: &RetryConfig) -> u32 {
        let calls = AtomicU32::new(0);
        let _ = cfg
            .retry(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(transient())
            })
            .await;
        calls.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn nan_and_out_of_range_numbers_never_panic() {
        // A NaN jitter used to make the first delay panic (`Duration::from_secs_f64(NaN)`).
        let cfg = RetryConfig {
            max_attempts: 2,
            jitter: f64::NAN,
            multiplier: f64::NAN,
            ..RetryConfig::default()
        };
        assert!(cfg.validate().is_err());
        assert_eq!(attempts_on_transient_errors(&cfg).await, 2);
        for text in [
            "jitter = nan",
            "jitter = 1.5",
            "jitter = -0.1",
            "multiplier = nan",
            "multiplier = inf",
            "multiplier = 0.5",
            "initial_backoff = nan",
            "max_elapsed = -1.0",
            "max_backoff = 1e300",
        ] {
            let parsed =
                crate::config::parse::<RetryConfig>(text, crate::config::ConfigFormat::Toml);
            assert!(parsed.is_err(), "{text} was accepted");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn max_elapsed_bounds_total_time() {
        let cfg = RetryConfig {
            max_attempts: 1000,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
            jitter: 0.0,
            max_elapsed: Duration::from_secs(5),
            ..RetryConfig::default()
        };
        let start = tokio::time::Instant::now();
        let attempts = attempts_on_transient_errors(&cfg).await;
        assert!(start.elapsed() <= Duration::from_secs(5));
        assert_eq!(attempts, 5);
    }

    proptest::proptest! {
        #[test]
        fn jittered_delay_stays_within_bounds(attempt in 1u32..100, jitter in 0.0f64..=1.0) {
            let cfg = RetryConfig { jitter, ..RetryConfig::default() };
            let d = cfg.delay(attempt);
            let base = cfg.base_delay(attempt);
            proptest::prop_assert!(d <= base);
            proptest::prop_assert!(d.as_secs_f64() >= base.as_secs_f64() * (1.0 - jitter) - 1e-9);
            proptest::prop_assert!(base <= cfg.max_backoff);
        }
    }
}
