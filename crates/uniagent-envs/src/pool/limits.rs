//! Limits a lease may ask for: valid, and within the image template's.

use super::PoolError;
use crate::config::DockerConfig;
use crate::leases::{ErrorKind, Limits};

/// Whether a sandbox started from `template` has the asked `limits`, so a warm one fits.
pub(super) fn same_limits(limits: &Limits, template: &DockerConfig) -> bool {
    limits
        .memory_bytes
        .is_none_or(|m| Some(m) == template.memory_bytes)
        && limits.cpus.is_none_or(|c| Some(c) == template.cpus)
        && limits
            .pids_limit
            .is_none_or(|p| Some(p) == template.pids_limit)
}

/// Asked limits must be valid and within the template's.
pub(super) fn check_limits(
    limits: &Limits,
    template: &DockerConfig,
) -> std::result::Result<(), PoolError> {
    let over = |what: &str, asked: String, max: String| {
        PoolError::new(
            ErrorKind::LimitExceeded,
            format!("{what} {asked} exceeds this pool's {max} for the image"),
        )
    };
    if let Some(m) = limits.memory_bytes {
        if m < 6 << 20 {
            return Err(PoolError::new(
                ErrorKind::BadRequest,
                "memory_bytes must be at least 6 MiB",
            ));
        }
        if template.memory_bytes.is_some_and(|max| m > max) {
            return Err(over(
                "memory_bytes",
                m.to_string(),
                format!("{:?}", template.memory_bytes),
            ));
        }
    }
    if let Some(c) = limits.cpus {
        if !(c.is_finite() && c > 0.0) {
            return Err(PoolError::new(
                ErrorKind::BadRequest,
                "cpus must be positive",
            ));
        }
        if template.cpus.is_some_and(|max| c > max) {
            return Err(over("cpus", c.to_string(), format!("{:?}", template.cpus)));
        }
    }
    if let Some(p) = limits.pids_limit {
        if p < 1 {
            return Err(PoolError::new(
                ErrorKind::BadRequest,
                "pids_limit must be at least 1",
            ));
        }
        if template.pids_limit.is_some_and(|max| p > max) {
            return Err(over(
                "pids_limit",
                p.to_string(),
                format!("{:?}", template.pids_limit),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_above_the_template_or_out_of_range_are_typed_errors() {
        let template = DockerConfig {
            memory_bytes: Some(1 << 30),
            cpus: Some(1.0),
            pids_limit: Some(100),
            ..DockerConfig::default()
        };
        let asked = |memory_bytes, cpus, pids_limit| Limits {
            memory_bytes,
            cpus,
            pids_limit,
        };
        assert!(check_limits(&asked(Some(256 << 20), Some(0.5), Some(50)), &template).is_ok());
        for (limits, kind) in [
            (asked(Some(2 << 30), None, None), ErrorKind::LimitExceeded),
            (asked(None, Some(2.0), None), ErrorKind::LimitExceeded),
            (asked(None, None, Some(101)), ErrorKind::LimitExceeded),
            (asked(Some(1), None, None), ErrorKind::BadRequest),
            (asked(None, Some(f64::NAN), None), ErrorKind::BadRequest),
            (asked(None, None, Some(0)), ErrorKind::BadRequest),
        ] {
            assert_eq!(
                check_limits(&limits, &template).unwrap_err().kind,
                kind,
                "{limits:?}"
            );
        }
        assert!(same_limits(&asked(None, Some(1.0), None), &template));
        assert!(!same_limits(&asked(None, Some(0.5), None), &template));
    }
}
