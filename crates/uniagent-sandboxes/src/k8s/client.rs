//! The API server connection of a [`K8sConfig`]: built once per process and connection setting,
//! shared by every sandbox (kube's client pools its connections).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use uniagent_core::{Error, Result};

use super::errors::{timeout, Failure};
use super::K8sConfig;

/// A connection to the API server: the client and the config it was built from (a drop builds
/// a client of its own from it on a fresh runtime).
#[derive(Clone)]
pub struct Connection {
    /// kube's client.
    pub client: kube::Client,
    /// The resolved configuration.
    pub config: kube::Config,
    /// Deadline of one request.
    pub api_timeout: Duration,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("cluster_url", &self.config.cluster_url)
            .field("namespace", &self.config.default_namespace)
            .finish()
    }
}

impl Connection {
    /// `call` (one API request) under the request deadline; a failure becomes the typed error
    /// of `verb` on `resource` (see [`Failure`]).
    pub async fn call<T>(
        &self,
        verb: &str,
        resource: &str,
        namespace: &str,
        call: impl Future<Output = std::result::Result<T, kube::Error>>,
    ) -> std::result::Result<T, (Failure, Error)> {
        match tokio::time::timeout(self.api_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                let failure = Failure::of(&e);
                let error = failure.clone().into_error(verb, resource, namespace);
                Err((failure, error))
            }
            Err(_) => Err((
                Failure::Unavailable(format!("no answer within {:?}", self.api_timeout)),
                timeout(&format!("{verb} {resource}"), self.api_timeout),
            )),
        }
    }
}

impl Connection {
    /// As [`call`](Self::call), with retryable failures (quota, 429, 5xx, unreachable, a
    /// request deadline) retried with `retry`'s backoff until `deadline`.
    pub async fn call_retrying<T, F, Fut>(
        &self,
        verb: &str,
        resource: &str,
        namespace: &str,
        retry: &uniagent_core::RetryConfig,
        deadline: tokio::time::Instant,
        mut call: F,
    ) -> std::result::Result<T, (Failure, Error)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, kube::Error>>,
    {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            match self.call(verb, resource, namespace, call()).await {
                Err((failure, error)) if failure.retryable() => {
                    let wait = retry.delay(attempt);
                    if tokio::time::Instant::now() + wait >= deadline {
                        return Err((failure, error));
                    }
                    tracing::debug!(%error, ?wait, "k8s: retrying {verb} {resource}");
                    tokio::time::sleep(wait).await;
                }
                done => return done,
            }
        }
    }
}

/// The shared connection of `cfg` (by `api_url`, `kubeconfig`, `context`).
pub async fn connect(cfg: &K8sConfig) -> Result<Connection> {
    static CONNECTIONS: OnceLock<Mutex<HashMap<String, Connection>>> = OnceLock::new();
    let key = format!("{:?}|{:?}|{:?}", cfg.api_url, cfg.kubeconfig, cfg.context);
    let cache = CONNECTIONS.get_or_init(Default::default);
    if let Some(found) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(found.clone());
    }
    let config = resolve(cfg).await?;
    let client = kube::Client::try_from(config.clone()).map_err(|e| {
        Error::config(format!(
            "k8s: cannot build a client for {}: {e}",
            config.cluster_url
        ))
    })?;
    let connection = Connection {
        client,
        config,
        api_timeout: cfg.api_timeout,
    };
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, connection.clone());
    Ok(connection)
}

/// `api_url` as is (no TLS, no credentials: a proxy such as `kubectl proxy`, or a test server);
/// else the kubeconfig file and context given; else in-cluster or `$KUBECONFIG`
/// (`kube::Config::infer`).
async fn resolve(cfg: &K8sConfig) -> Result<kube::Config> {
    let mut config = if let Some(url) = &cfg.api_url {
        let uri = url
            .parse()
            .map_err(|e| Error::config(format!("k8s.api_url `{url}`: {e}")))?;
        kube::Config::new(uri)
    } else if cfg.kubeconfig.is_some() || cfg.context.is_some() {
        let options = KubeConfigOptions {
            context: cfg.context.clone(),
            ..KubeConfigOptions::default()
        };
        let kubeconfig = match &cfg.kubeconfig {
            Some(path) => Kubeconfig::read_from(path)
                .map_err(|e| Error::config(format!("k8s.kubeconfig `{}`: {e}", path.display())))?,
            None => Kubeconfig::read()
                .map_err(|e| Error::config(format!("k8s: reading the kubeconfig: {e}")))?,
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| Error::config(format!("k8s: the kubeconfig's context: {e}")))?
    } else {
        kube::Config::infer().await.map_err(|e| {
            Error::config(format!(
                "k8s: no cluster found (not in a pod, no kubeconfig): {e}; set k8s.api_url or k8s.kubeconfig"
            ))
        })?
    };
    config.connect_timeout = Some(cfg.api_timeout);
    config.default_namespace = cfg.namespace.clone();
    Ok(config)
}
