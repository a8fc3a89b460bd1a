//! A small JSON client of the pool API over hyper: one request, one deadline, the status and
//! the body back. Errors here are transport failures only; HTTP statuses are data.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

use crate::leases::{ApiError, ErrorKind};

/// Largest answer body read; pool answers are small.
const MAX_ANSWER: usize = 4 << 20;

/// A client of one or more pools' control planes.
#[derive(Clone)]
pub(crate) struct Control {
    client: Client<HttpConnector, Full<Bytes>>,
    api_key: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field(
                "api_key",
                &uniagent_core::config::redacted(self.api_key.as_deref()),
            )
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Answer {
    /// The body as `T`.
    pub(crate) fn json<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| {
            format!(
                "HTTP {} with an unexpected body ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body[..self.body.len().min(200)])
            )
        })
    }

    /// The typed error of a non-success answer, when the body is one.
    pub(crate) fn error(&self) -> (Option<ErrorKind>, String) {
        match serde_json::from_slice::<ApiError>(&self.body) {
            Ok(e) => (Some(e.error.kind), e.error.message),
            Err(_) => (
                None,
                format!(
                    "HTTP {}: {}",
                    self.status,
                    String::from_utf8_lossy(&self.body[..self.body.len().min(200)])
                ),
            ),
        }
    }
}

impl Control {
    pub(crate) fn new(timeout: Duration, api_key: Option<String>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout.min(Duration::from_secs(5))));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Self {
            client,
            api_key,
            timeout,
        }
    }

    /// The deadline of one request.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same client with another deadline per request.
    pub(crate) fn with_timeout(&self, timeout: Duration) -> Self {
        Self {
            timeout,
            ..self.clone()
        }
    }

    /// Sends one request; `token` goes in `X-API-Key` (lease routes), the API key in
    /// `Authorization`. `Err` is a transport failure or a missed deadline.
    pub(crate) async fn send(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, String> {
        let mut builder = Request::builder().method(method).uri(url);
        if let Some(key) = &self.api_key {
            builder = builder.header("authorization", format!("Bearer {key}"));
        }
        if let Some(token) = token {
            builder = builder.header("x-api-key", token);
        }
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| format!("bad request to {url}: {e}"))?;
        let exchange = async {
            let answer = self
                .client
                .request(request)
                .await
                .map_err(|e| format!("{url}: {}", uniagent_core::error_chain(&e)))?;
            let status = answer.status();
            let body = http_body_util::Limited::new(answer.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("{url}: reading the answer: {e}"))?
                .to_bytes();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("{url}: no answer within {:?}", self.timeout))?
    }
}
