//! The sandbox router: `X-Sandbox-ID` + `X-Sandbox-Namespace` resolved through the store (as
//! the real router's cache does) to the sandbox's pod IP, `X-Sandbox-Port` as the port; headers
//! checked as `sandbox-router/proxy/headers.go` checks them; `Authorization` stripped; bodies
//! streamed both ways; 502 after dial retries.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpStream;

use super::store::{Resource, Store};

/// The real router's defaults.
const DEFAULT_NAMESPACE: &str = "default";
const DEFAULT_PORT: u16 = 8888;
/// Dial attempts in all, and the first and longest wait between them (the real router's
/// retry transport: 200 ms doubling up to 800 ms).
const DIAL_ATTEMPTS: u32 = 4;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);
const MAX_RETRY_DELAY: Duration = Duration::from_millis(800);

/// Hop-by-hop headers a proxy does not forward.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

#[derive(Clone, Debug)]
struct RouterState {
    store: Arc<Store>,
}

/// The router's routes.
pub(crate) fn router(store: Arc<Store>) -> Router {
    Router::new()
        .fallback(forward)
        .with_state(RouterState { store })
}

fn detail(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"detail": text}).to_string(),
    )
        .into_response()
}

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn valid_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

struct RouteTarget {
    id: String,
    namespace: String,
    port: u16,
    pod_ip: Option<IpAddr>,
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The routing headers, checked as the real router checks them (same 400 details).
fn parse_headers(headers: &HeaderMap) -> Result<RouteTarget, &'static str> {
    let bad = |text: &'static str| text;
    let id = header_text(headers, "x-sandbox-id");
    if id.is_empty() {
        return Err(bad("X-Sandbox-ID header is required."));
    }
    if !valid_dns_label(id) {
        return Err(bad("Invalid sandbox ID format."));
    }
    let namespace = match header_text(headers, "x-sandbox-namespace") {
        "" => DEFAULT_NAMESPACE,
        ns => ns,
    };
    if !valid_dns_label(namespace) {
        return Err(bad("Invalid namespace format."));
    }
    let port = match header_text(headers, "x-sandbox-port") {
        "" => DEFAULT_PORT,
        raw => match raw.parse::<i64>() {
            Ok(n) if (1..=65535).contains(&n) => u16::try_from(n).unwrap_or(DEFAULT_PORT),
            _ => return Err(bad("Invalid port format.")),
        },
    };
    let pod_ip = match header_text(headers, "x-sandbox-pod-ip") {
        "" => None,
        raw => {
            let ip: IpAddr = raw.parse().map_err(|_| bad("Invalid target IP address."))?;
            let refused = ip.is_unspecified()
                || ip.is_multicast()
                || ip.is_loopback()
                || match ip {
                    IpAddr::V4(v4) => v4.is_link_local(),
                    IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
                };
            if refused {
                return Err(bad("Invalid target IP address."));
            }
            Some(ip)
        }
    };
    Ok(RouteTarget {
        id: id.to_string(),
        namespace: namespace.to_string(),
        port,
        pod_ip,
    })
}

/// The first pod IP of the Sandbox `namespace/id`.
fn resolve(store: &Store, namespace: &str, id: &str) -> Option<IpAddr> {
    let sandbox = store.get(Resource::Sandboxes, namespace, id)?;
    sandbox["status"]["podIPs"]
        .as_array()?
        .first()?
        .as_str()?
        .parse()
        .ok()
}

async fn dial(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut delay = FIRST_RETRY_DELAY;
    let mut attempt = 1;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) if attempt >= DIAL_ATTEMPTS => return Err(e),
            Err(_) if attempt >= DIAL_ATTEMPTS => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "dial timed out",
                ))
            }
            _ => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
        attempt += 1;
    }
}

async fn forward(State(state): State<RouterState>, request: Request) -> Response {
    let target = match parse_headers(request.headers()) {
        Ok(target) => target,
        Err(text) => return detail(StatusCode::BAD_REQUEST, text),
    };
    let unreachable = || {
        detail(
            StatusCode::BAD_GATEWAY,
            &format!("Could not connect to the backend sandbox: {}", target.id),
        )
    };
    let Some(ip) = target
        .pod_ip
        .or_else(|| resolve(&state.store, &target.namespace, &target.id))
    else {
        return unreachable();
    };
    let addr = SocketAddr::new(ip, target.port);
    let Ok(stream) = dial(addr).await else {
        return unreachable();
    };
    let _ = stream.set_nodelay(true);
    let Ok((mut sender, connection)) =
        hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await
    else {
        return unreachable();
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });

    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    parts.uri = match path.parse::<Uri>() {
        Ok(uri) => uri,
        Err(_) => return detail(StatusCode::BAD_REQUEST, "Invalid request path."),
    };
    parts.version = axum::http::Version::HTTP_11;
    let headers = &mut parts.headers;
    headers.remove(header::AUTHORIZATION);
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    if let Ok(host) = HeaderValue::from_str(&addr.to_string()) {
        headers.insert(header::HOST, host);
    }
    let upstream = Request::from_parts(parts, body);
    match sender.send_request(upstream).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            for name in HOP_BY_HOP {
                parts.headers.remove(name);
            }
            Response::from_parts(parts, Body::new(body))
        }
        Err(_) => unreachable(),
    }
}
