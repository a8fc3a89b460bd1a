//! The `remote` backend's settings, their checks and its builder.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uniagent_core::{duration_secs, Result, RetryConfig};

use crate::config::{check_positive, check_url, BackendConfig};

/// Settings of the `remote` backend.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// Base URL of the server, e.g. `http://127.0.0.1:8000`.
    pub url: String,
    /// Token sent as `X-API-Key`.
    pub auth_token: Option<String>,
    /// Environment variable holding the token (preferred over writing it in the file).
    pub auth_token_env: Option<String>,
    /// Transport timeout for requests without a command timeout, seconds.
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    /// Retries of transient connection failures.
    pub retry: RetryConfig,
}

/// The token is redacted: configurations end up in logs.
impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("url", &self.url)
            .field(
                "auth_token",
                &uniagent_core::config::redacted(self.auth_token.as_deref()),
            )
            .field("auth_token_env", &self.auth_token_env)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            auth_token: None,
            auth_token_env: None,
            timeout: Duration::from_secs(60),
            retry: RetryConfig::default(),
        }
    }
}

impl BackendConfig for RemoteConfig {
    fn validate(&self) -> Result<()> {
        check_url("remote.url", &self.url)?;
        self.retry.validate()?;
        check_positive("remote.timeout", self.timeout)
    }
}

#[cfg(feature = "remote")]
#[async_trait::async_trait]
impl crate::config::BackendBuilder for RemoteConfig {
    fn build(&self) -> Result<Box<dyn uniagent_core::Deployment>> {
        Ok(Box::new(super::RemoteDeployment::new(self.clone())?))
    }
}
