//! What an API server's answer means for a sandbox: each failure of a request becomes one typed
//! [`uniagent_core::Error`] (the table of decision 0008, "Errors"), retryable or not.

use std::time::Duration;

use uniagent_core::Error;

/// The backend's name in errors.
pub const BACKEND: &str = "k8s";

/// What a failed API request was: enough to decide whether to retry and how to report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 403 naming an exceeded quota: retried until the start deadline.
    QuotaExceeded(String),
    /// Any other 403: the worker's Role lacks a grant.
    Forbidden(String),
    /// 404.
    NotFound(String),
    /// 409 (`AlreadyExists` or a conflict).
    Conflict(String),
    /// 400 or 422: the object was refused, a bug on our side.
    Rejected(String),
    /// 429, 5xx, a connection or read failure, a request deadline: retried with backoff.
    Unavailable(String),
    /// Anything else (a TLS or configuration failure).
    Other(String),
}

impl Failure {
    /// The classification of `error`.
    pub fn of(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => {
                let text = if status.message.is_empty() {
                    status.reason.clone()
                } else {
                    status.message.clone()
                };
                match status.code {
                    403 if text.contains("exceeded quota") => Self::QuotaExceeded(text),
                    403 => Self::Forbidden(text),
                    404 => Self::NotFound(text),
                    409 => Self::Conflict(text),
                    400 | 422 => Self::Rejected(text),
                    429 | 500..=599 => Self::Unavailable(format!("HTTP {}: {text}", status.code)),
                    code => Self::Other(format!("HTTP {code}: {text}")),
                }
            }
            kube::Error::HyperError(e) => Self::Unavailable(e.to_string()),
            kube::Error::Service(e) => Self::Unavailable(e.to_string()),
            kube::Error::ReadEvents(e) => Self::Unavailable(e.to_string()),
            other => Self::Other(other.to_string()),
        }
    }

    /// Whether a later attempt may succeed.
    pub fn retryable(&self) -> bool {
        matches!(self, Self::QuotaExceeded(_) | Self::Unavailable(_))
    }

    /// The error a caller sees for `verb` on `resource` in `namespace`.
    pub fn into_error(self, verb: &str, resource: &str, namespace: &str) -> Error {
        let what = format!("{verb} {resource} in namespace `{namespace}`");
        match self {
            Self::QuotaExceeded(m) => sandbox(format!("k8s quota_exceeded: {what}: {m}"), true),
            Self::Forbidden(m) => Error::config(format!(
                "k8s forbidden: {what}: {m}; grant it to the worker's service account \
                 (deploy/k8s/agent-sandbox/rbac.yaml)"
            )),
            Self::NotFound(m) => sandbox(format!("k8s not_found: {what}: {m}"), false),
            Self::Conflict(m) => sandbox(format!("k8s conflict: {what}: {m}"), true),
            Self::Rejected(m) => Error::internal(format!("k8s rejected: {what}: {m}")),
            Self::Unavailable(m) => sandbox(format!("k8s api_unavailable: {what}: {m}"), true),
            Self::Other(m) => sandbox(format!("k8s api_error: {what}: {m}"), false),
        }
    }
}

/// A sandbox error of this backend.
pub fn sandbox(message: String, retryable: bool) -> Error {
    Error::Sandbox {
        backend: BACKEND.into(),
        message,
        retryable,
        source: None,
    }
}

/// A deadline of this backend passed.
pub fn timeout(what: &str, after: Duration) -> Error {
    Error::Timeout {
        operation: format!("k8s {what}"),
        after,
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    #[test]
    fn each_answer_has_its_class_and_error() {
        let quota = Failure::of(&api(
            403,
            "Forbidden",
            "sandboxclaims \"x\" is forbidden: exceeded quota: agents, requested: count/sandboxclaims=1",
        ));
        assert!(matches!(quota, Failure::QuotaExceeded(_)) && quota.retryable());
        let err = quota.into_error("create", "sandboxclaims", "ns");
        assert!(err.to_string().contains("quota_exceeded"), "{err}");
        assert!(matches!(
            err,
            Error::Sandbox {
                retryable: true,
                ..
            }
        ));

        let rbac = Failure::of(&api(403, "Forbidden", "cannot create resource"));
        assert!(!rbac.retryable());
        let err = rbac.into_error("create", "sandboxclaims", "ns");
        assert!(matches!(err, Error::Config { .. }));
        assert!(err.to_string().contains("rbac.yaml"), "{err}");

        for code in [429, 500, 503] {
            let f = Failure::of(&api(code, "", "busy"));
            assert!(f.retryable(), "{code}");
        }
        assert_eq!(
            Failure::of(&api(404, "NotFound", "gone")),
            Failure::NotFound("gone".into())
        );
        assert!(matches!(
            Failure::of(&api(409, "AlreadyExists", "exists")),
            Failure::Conflict(_)
        ));
        let rejected = Failure::of(&api(422, "Invalid", "spec.env: forbidden"));
        assert!(matches!(
            rejected.into_error("create", "sandboxclaims", "ns"),
            Error::Internal { .. }
        ));
    }
}
