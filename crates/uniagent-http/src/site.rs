//! [`SitePolicy`]: which `Host` and `Origin` headers a server answers.
//!
//! A browser lets any web page send requests to a server on the operator's machine (a "simple"
//! POST with a `text/plain` body needs no preflight), and a DNS-rebinding page can even read the
//! answers: its own host name resolves to 127.0.0.1, so the browser thinks it is same-origin.
//! Two checks stop both: a request whose `Origin` is not the `Host` it was sent to is cross-site,
//! and a `Host` that is neither an IP address, `localhost`, nor allow-listed is a rebound name.

use axum::http::{header, HeaderMap};

/// Why a request was refused by a [`SitePolicy`] (answered with 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteRefusal {
    /// The `Origin` header names another site than the `Host` header.
    CrossOrigin,
    /// The `Host` header is not an IP address, `localhost` or an allowed name.
    HostNotAllowed,
}

impl SiteRefusal {
    /// The message sent to the client.
    pub fn message(self) -> &'static str {
        match self {
            Self::CrossOrigin => "Forbidden: cross-origin request",
            Self::HostNotAllowed => {
                "Forbidden: Host must be an IP address, localhost or an allowed host name"
            }
        }
    }
}

impl std::fmt::Display for SiteRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for SiteRefusal {}

/// Which hosts a server answers.
///
/// ```
/// use axum::http::{HeaderMap, HeaderValue};
/// use uniagent_http::{SitePolicy, SiteRefusal};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("host", HeaderValue::from_static("127.0.0.1:8000"));
/// assert_eq!(SitePolicy::local().check(&headers), Ok(()));
///
/// headers.insert("origin", HeaderValue::from_static("https://evil.example"));
/// assert_eq!(SitePolicy::local().check(&headers), Err(SiteRefusal::CrossOrigin));
///
/// let mut rebound = HeaderMap::new();
/// rebound.insert("host", HeaderValue::from_static("evil.example:8000"));
/// assert_eq!(SitePolicy::local().check(&rebound), Err(SiteRefusal::HostNotAllowed));
/// let named = SitePolicy::local().allow_hosts(["evil.example"]);
/// assert_eq!(named.check(&rebound), Ok(()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitePolicy {
    /// Whether the `Host` header is checked at all.
    check_host: bool,
    /// Host names (lowercase, without port) answered besides IP addresses and `localhost`.
    allowed: Vec<String>,
}

impl SitePolicy {
    /// Answers IP addresses and `localhost` only (and names added with
    /// [`allow_hosts`](Self::allow_hosts)); refuses cross-origin requests.
    pub fn local() -> Self {
        Self {
            check_host: true,
            allowed: Vec::new(),
        }
    }

    /// Answers any `Host` (for servers whose clients authenticate: a page cannot forge the
    /// credential); still refuses cross-origin requests.
    pub fn any_host() -> Self {
        Self {
            check_host: false,
            allowed: Vec::new(),
        }
    }

    /// Also answers these host names (compared without case and port; a `:port` given here
    /// is ignored).
    pub fn allow_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for host in hosts {
            let name = host_name(host.as_ref()).to_ascii_lowercase();
            if !name.is_empty() && !self.allowed.contains(&name) {
                self.allowed.push(name);
            }
        }
        self
    }

    /// Checks a request's headers.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), SiteRefusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
            if origin_host.is_empty() || !origin_host.eq_ignore_ascii_case(host) {
                return Err(SiteRefusal::CrossOrigin);
            }
        }
        if self.check_host && !is_local_host(host) {
            let name = host_name(host);
            if !self.allowed.iter().any(|a| a.eq_ignore_ascii_case(name)) {
                return Err(SiteRefusal::HostNotAllowed);
            }
        }
        Ok(())
    }
}

/// A `Host` header's name without its port (`[::1]:80` gives `[::1]`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// Whether a `Host` header names an IP address or `localhost` (with an optional port).
///
/// ```
/// use uniagent_http::is_local_host;
/// assert!(is_local_host("127.0.0.1:8000"));
/// assert!(is_local_host("[::1]:8000"));
/// assert!(is_local_host("LOCALHOST"));
/// assert!(!is_local_host("example.com:8000"));
/// assert!(!is_local_host(""));
/// ```
pub fn is_local_host(host: &str) -> bool {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((v6, _)) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => false,
        };
    }
    let name = host_name(host);
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

/// Whether a `Content-Type` value is JSON (`application/json` or any `+json` type, parameters
/// ignored).
///
/// ```
/// use uniagent_http::is_json_content_type;
/// assert!(is_json_content_type("application/json; charset=utf-8"));
/// assert!(is_json_content_type("application/vnd.api+json"));
/// assert!(!is_json_content_type("text/plain"));
/// ```
pub fn is_json_content_type(value: &str) -> bool {
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}
