//! The data plane: requests to `/v1/leases/{id}/sandbox/{path}` go byte for byte to the
//! sandbox's server (`{url}/{path}`), bodies streamed both ways, over kept-alive connections.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Headers that belong to one connection, not to the request.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "host",
];

/// Attempts of one proxied request over a connection that fails.
const ATTEMPTS: u64 = 4;

/// Largest request body forwarded (uploads of archives included).
const MAX_REQUEST_BODY: usize = 1 << 30;

/// A pooled HTTP client to every sandbox of the pool.
#[derive(Clone)]
pub(crate) struct Proxy {
    client: Client<HttpConnector, Body>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

/// Why a request could not be forwarded.
#[derive(Debug)]
pub(crate) struct Unreachable(pub String);

impl Proxy {
    pub(crate) fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        let client = Client::builder(TokioExecutor::new())
            // Longer than a client's pause between two commands, shorter than the relay's.
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self { client }
    }

    /// Sends `request` to `{base}/{path}` (with the request's query) and returns the answer.
    ///
    /// The body is read first, so that a request that found no working connection can be
    /// sent again: a connection that failed to open is always retried, one that broke after
    /// the request went out only when the request carries an `X-Request-ID` (the sandbox
    /// server then answers a repeat from its replay cache instead of running it twice).
    pub(crate) async fn forward(
        &self,
        base: &str,
        path: &str,
        request: Request<Body>,
    ) -> Result<Response<Body>, Unreachable> {
        let (mut parts, body) = request.into_parts();
        let query = parts
            .uri
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        parts.uri = format!("{base}/{path}{query}")
            .parse()
            .map_err(|e| Unreachable(format!("bad upstream URI: {e}")))?;
        strip_hop_by_hop(&mut parts.headers);
        let body = axum::body::to_bytes(body, MAX_REQUEST_BODY)
            .await
            .map_err(|e| Unreachable(format!("reading the request body: {e}")))?;
        let replayable = parts.headers.contains_key("x-request-id");
        let mut attempt = 0;
        let answer = loop {
            attempt += 1;
            let request = Request::from_parts(parts.clone(), Body::from(body.clone()));
            match self.client.request(request).await {
                Ok(answer) => break answer,
                Err(e) if attempt < ATTEMPTS && (e.is_connect() || replayable) => {
                    tracing::debug!(error = %uniagent_core::error_chain(&e), attempt, "retrying a proxied request");
                    tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
                }
                Err(e) => {
                    return Err(Unreachable(format!(
                        "the sandbox's server did not answer: {}",
                        uniagent_core::error_chain(&e)
                    )))
                }
            }
        };
        let (mut parts, body) = answer.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    /// One `is_alive` to `base`: whether the server answers 200, and a connection left open
    /// for the first real request.
    pub(crate) async fn warm_up(&self, base: &str, token: &str) -> bool {
        let Ok(token) = HeaderValue::from_str(token) else {
            return false;
        };
        let Ok(request) = Request::get(format!("{base}/is_alive"))
            .header("x-api-key", token)
            .body(Body::empty())
        else {
            return false;
        };
        let probe = async {
            let Ok(answer) = self.client.request(request).await else {
                return false;
            };
            let ok = answer.status().is_success();
            // Reading the body to its end returns the connection to the pool.
            let _ = axum::body::to_bytes(Body::new(answer.into_body()), 1 << 16).await;
            ok
        };
        tokio::time::timeout(Duration::from_secs(5), probe)
            .await
            .unwrap_or(false)
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}
