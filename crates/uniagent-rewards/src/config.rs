//! Checks on configuration numbers, applied when a reward's config is loaded.

/// The longest timeout a reward accepts: a week. Longer values are typos (or `1e300`) and would
/// overflow deadline arithmetic further down.
pub(crate) const MAX_TIMEOUT_SECS: f64 = 7.0 * 24.0 * 3600.0;

/// Why `secs` is not a usable timeout, if it is not.
pub(crate) fn timeout_problem(secs: f64) -> Option<String> {
    if !secs.is_finite() || secs <= 0.0 {
        Some(format!(
            "timeout_secs must be a positive number of seconds, found {secs}"
        ))
    } else if secs > MAX_TIMEOUT_SECS {
        Some(format!(
            "timeout_secs must be at most {MAX_TIMEOUT_SECS} (a week), found {secs}"
        ))
    } else {
        None
    }
}

/// A reward timeout in a config: seconds (fractional allowed) on the wire, a [`Duration`] in
/// code. Loading refuses NaN, infinities, zero, negative and absurdly large values.
pub(crate) mod timeout_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the seconds as a float.
    pub(crate) fn serialize<S: Serializer>(timeout: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(timeout.as_secs_f64())
    }

    /// Reads positive seconds, at most a week.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        match super::timeout_problem(secs) {
            Some(problem) => Err(serde::de::Error::custom(problem)),
            None => Ok(Duration::from_secs_f64(secs)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{CommandReward, TestsReward};

    #[test]
    fn bad_timeouts_are_refused_at_load_time() {
        for bad in ["-1", "0", "1e300", "-0.5"] {
            let tests =
                serde_json::from_str::<TestsReward>(&format!(r#"{{"timeout_secs": {bad}}}"#));
            let err = tests.unwrap_err().to_string();
            assert!(err.contains("timeout_secs"), "{bad}: {err}");
            let command =
                serde_json::from_str::<CommandReward>(&format!(r#"{{"timeout_secs": {bad}}}"#));
            assert!(command.is_err(), "{bad}");
        }
        // NaN has no JSON spelling; YAML-ish configs reach serde as a float.
        let nan = serde_json::Value::from(f64::NAN);
        assert!(
            serde_json::from_value::<TestsReward>(serde_json::json!({"timeout_secs": nan}))
                .is_err()
        );
        assert!(super::timeout_problem(f64::NAN).is_some());
        assert!(super::timeout_problem(f64::INFINITY).is_some());
        let ok: TestsReward = serde_json::from_str(r#"{"timeout_secs": 30.5}"#).unwrap();
        assert_eq!(ok.timeout, std::time::Duration::from_millis(30_500));
        assert_eq!(serde_json::to_value(&ok).unwrap()["timeout_secs"], 30.5);
    }
}
