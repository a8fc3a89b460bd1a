//! The data plane: requests to `/v1/leases/{id}/sandbox/{path}` go byte for byte to the
//! sandbox's server (`{url}/{path}`), bodies streamed both ways, over kept-alive connections.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, Response, Uri};
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
        let uri: Uri = format!("{base}/{path}{query}")
            .parse()
            .map_err(|e| Unreachable(format!("bad upstream URI: {e}")))?;
        parts.uri = uri;
        strip_hop_by_hop(&mut parts.headers);
        let answer = self
            .client
            .request(Request::from_parts(parts, body))
            .await
            .map_err(|e| Unreachable(format!("the sandbox's server did not answer: {e}")))?;
        let (mut parts, body) = answer.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    /// One `is_alive` to `base`, so that a connection stays open for the first real request.
    pub(crate) async fn warm_up(&self, base: &str, token: &str) {
        let Ok(token) = HeaderValue::from_str(token) else {
            return;
        };
        let Ok(request) = Request::get(format!("{base}/is_alive"))
            .header("x-api-key", token)
            .body(Body::empty())
        else {
            return;
        };
        let probe = async {
            if let Ok(answer) = self.client.request(request).await {
                // Reading the body to its end returns the connection to the pool.
                let _ = axum::body::to_bytes(Body::new(answer.into_body()), 1 << 16).await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), probe).await;
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}
