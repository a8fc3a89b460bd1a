//! What a lease request may ask for: a served image, a time to live within the pool's
//! maximum, limits valid and within the image template's.

use std::time::Duration;

use super::{ImagePool, PoolConfig, PoolError};
use crate::config::DockerConfig;
use crate::leases::{AcquireRequest, ErrorKind, Limits};

/// What an admitted lease request gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission<'a> {
    /// The image's entry in the pool's configuration.
    pub template: &'a ImagePool,
    /// The lease's time to live: the asked one, else the pool's `lease_ttl`.
    pub ttl: Duration,
    /// The asked limits, when any were given.
    pub limits: Option<Limits>,
    /// Whether a warm sandbox (started with the template's limits) fits.
    pub warm_ok: bool,
}

/// Checks a lease request against a pool's configuration without starting anything: the
/// first thing `POST /v1/leases` does with a client's body.
///
/// ```
/// use uniagent_sandboxes::leases::{AcquireRequest, ErrorKind};
/// use uniagent_sandboxes::pool::{admit, PoolConfig};
///
/// let config: PoolConfig = uniagent_core::config::parse(
///     "name: n\nmax_ttl: 60\nimages:\n  - docker: {image: 'img:1', memory_bytes: 268435456}\n",
///     uniagent_core::config::ConfigFormat::Yaml,
/// ).unwrap();
/// let ask = |json: &str| admit(&config, &serde_json::from_str::<AcquireRequest>(json).unwrap());
/// assert_eq!(ask(r#"{"image": "img:1", "ttl_secs": 20}"#).unwrap().ttl.as_secs(), 20);
/// assert_eq!(ask(r#"{"image": "img:1", "ttl_secs": 1e300}"#).unwrap_err().kind, ErrorKind::LimitExceeded);
/// assert_eq!(ask(r#"{"image": "img:1", "ttl_secs": 3e-100}"#).unwrap_err().kind, ErrorKind::BadRequest);
/// assert_eq!(ask(r#"{"image": "other"}"#).unwrap_err().kind, ErrorKind::UnknownImage);
/// ```
pub fn admit<'a>(
    config: &'a PoolConfig,
    request: &AcquireRequest,
) -> std::result::Result<Admission<'a>, PoolError> {
    let template = config.image(&request.image).ok_or_else(|| {
        PoolError::new(
            ErrorKind::UnknownImage,
            format!("this pool does not serve image `{}`", request.image),
        )
    })?;
    let ttl = lease_ttl(config, request.ttl_secs)?;
    let limits = request.limits.clone().filter(|l| !l.is_empty());
    if let Some(limits) = &limits {
        check_limits(limits, &template.docker)?;
    }
    let warm_ok = limits
        .as_ref()
        .is_none_or(|l| same_limits(l, &template.docker));
    Ok(Admission {
        template,
        ttl,
        limits,
        warm_ok,
    })
}

/// The time to live a request asks for (`None`: the pool's default), checked against the
/// pool's `max_ttl`.
pub(super) fn lease_ttl(
    config: &PoolConfig,
    asked: Option<f64>,
) -> std::result::Result<Duration, PoolError> {
    let Some(secs) = asked else {
        return Ok(config.lease_ttl);
    };
    // At least a millisecond: a tinier positive value would round to a lease that is
    // expired when granted (found by the pool_requests fuzz target).
    if !(secs.is_finite() && secs >= 0.001) {
        return Err(PoolError::new(
            ErrorKind::BadRequest,
            format!("ttl_secs must be a number of seconds >= 0.001, got {secs}"),
        ));
    }
    // Compared as seconds first: a huge value has no Duration (from_secs_f64 would panic).
    match Duration::try_from_secs_f64(secs) {
        Ok(ttl) if ttl <= config.max_ttl => Ok(ttl),
        _ => Err(PoolError::new(
            ErrorKind::LimitExceeded,
            format!(
                "ttl_secs {secs} exceeds this pool's max_ttl of {} s",
                config.max_ttl.as_secs_f64()
            ),
        )),
    }
}

/// Whether a sandbox started from `template` has the asked `limits`, so a warm one fits.
fn same_limits(limits: &Limits, template: &DockerConfig) -> bool {
    limits
        .memory_bytes
        .is_none_or(|m| Some(m) == template.memory_bytes)
        && limits.cpus.is_none_or(|c| Some(c) == template.cpus)
        && limits
            .pids_limit
            .is_none_or(|p| Some(p) == template.pids_limit)
}

/// Asked limits must be valid and within the template's.
fn check_limits(limits: &Limits, template: &DockerConfig) -> std::result::Result<(), PoolError> {
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
