//! One HTTP exchange with retries: idempotency keys, deadlines and error classification.

use std::time::Duration;

use reqwest::{Method, RequestBuilder};
use serde::de::DeserializeOwned;
use uniagent_core::{Error, Result, RetryConfig};

use super::decode::decode_response;
use super::pooled::{closed_before_answer, Pooled};

/// What to send; rebuilt for every attempt because multipart bodies are single-use.
pub(crate) enum Body<'a> {
    /// No body (`GET`, `POST /close`).
    Empty,
    /// A JSON document.
    Json(&'a serde_json::Value),
    /// `POST /upload`'s form.
    Upload {
        data: bytes::Bytes,
        file_name: &'a str,
        target_path: &'a str,
        unzip: bool,
    },
}

/// The connection to one server: base URL, token, pooled HTTP client and retry policy.
pub(crate) struct Transport {
    pub(crate) http: reqwest::Client,
    pub(crate) base_url: String,
    pub(crate) token: Option<String>,
    pub(crate) backend: String,
    pub(crate) retry: RetryConfig,
    /// Counts the connections `http` opens.
    pub(crate) pooled: Pooled,
}

impl Transport {
    /// Sends `body` to `path` and decodes the answer. Failures to connect are retried (nothing
    /// reached the server); a connection that broke after the request went out is retried (with
    /// the same `X-Request-ID`) only for idempotent calls: the server may have run a command, and
    /// one that restarted in between has no memory of the id. (A request that met a pooled
    /// connection the server had closed is resent at once by [`Transport::exchange`].)
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_>,
        deadline: Option<Duration>,
    ) -> Result<T> {
        let request_id = request_id();
        let idempotent = is_idempotent(&method, path);
        self.retry
            .retry(|| async {
                let (status, bytes) = self
                    .exchange(method.clone(), path, &body, deadline, &request_id)
                    .await
                    .map_err(|e| {
                        if idempotent {
                            e.error
                        } else {
                            e.connect_only()
                        }
                    })?;
                decode_response(&self.backend, status, &bytes)
            })
            .await
    }

    /// One attempt: the status and the whole body, or a classified transport error.
    ///
    /// A request that went out on a pooled keep-alive connection which ended before any answer
    /// met a server that had closed that connection (see [`super::pooled`]); it is resent at
    /// once, under the same `X-Request-ID`, a few times at most. Only at once: a server that
    /// died with the request could not have restarted yet, so a refused resend ends the attempt
    /// with the original error, which [`Transport::call`] does not retry for a command, instead
    /// of waiting for a restart that would run the command a second time.
    pub(crate) async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: &Body<'_>,
        deadline: Option<Duration>,
        request_id: &str,
    ) -> std::result::Result<(u16, bytes::Bytes), ExchangeError> {
        const STALE_RESENDS: usize = 3;
        let mut first_stale = None;
        let mut resends = 0;
        loop {
            match self
                .send_once(method.clone(), path, body, deadline, request_id)
                .await
            {
                Err(e) if e.stale && resends < STALE_RESENDS => {
                    tracing::debug!(path, request_id, "pooled connection was closed; resending");
                    resends += 1;
                    first_stale.get_or_insert(e);
                }
                Err(e) => return Err(first_stale.unwrap_or(e)),
                Ok(answer) => return Ok(answer),
            }
        }
    }

    /// Sends the request once.
    async fn send_once(
        &self,
        method: Method,
        path: &str,
        body: &Body<'_>,
        deadline: Option<Duration>,
        request_id: &str,
    ) -> std::result::Result<(u16, bytes::Bytes), ExchangeError> {
        let url = format!("{}{}", self.base_url, path);
        let mut request = self
            .http
            .request(method.clone(), &url)
            .header("X-Request-ID", request_id);
        if let Some(token) = self.token.as_deref().filter(|t| !t.is_empty()) {
            request = request.header("X-API-Key", token);
        }
        if let Some(deadline) = deadline {
            request = request.timeout(deadline);
        }
        request = attach(request, body).map_err(|error| ExchangeError {
            error,
            connected: false,
            stale: false,
        })?;
        let operation = || format!("{method} {path}");
        let mark = self.pooled.mark();
        let response = request.send().await.map_err(|e| ExchangeError {
            connected: !(e.is_connect() || never_read(&e)),
            stale: closed_before_answer(&e) && self.pooled.none_opened_since(mark),
            error: self.transport_error(&operation(), deadline, e),
        })?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| ExchangeError {
            connected: true,
            stale: false,
            error: self.transport_error(&operation(), deadline, e),
        })?;
        Ok((status, bytes))
    }

    /// Classifies a failed exchange.
    ///
    /// A deadline that passed is [`Error::Timeout`] and never retried: the server may still be
    /// running the command. Everything else below HTTP (refused, reset, closed mid-answer) is a
    /// connection failure, retryable with the same idempotency key.
    fn transport_error(
        &self,
        operation: &str,
        deadline: Option<Duration>,
        e: reqwest::Error,
    ) -> Error {
        if e.is_timeout() {
            return Error::Timeout {
                operation: format!("{operation} on {}", self.base_url),
                after: deadline.unwrap_or_default(),
            };
        }
        if e.is_builder() {
            return Error::invalid_input(format!(
                "{}: cannot build {operation}: {e}",
                self.backend
            ));
        }
        let what = if e.is_connect() {
            "cannot connect to"
        } else {
            "connection failed during"
        };
        Error::Sandbox {
            backend: self.backend.clone(),
            message: format!(
                "{what} {operation} at {}: {}",
                self.base_url,
                uniagent_core::error_chain(&e)
            ),
            retryable: true,
            source: Some(Box::new(e)),
        }
    }
}

/// Calls that can run twice without harm: reads, `/is_alive`, whole-file writes, and `/close`
/// (closing every session again closes nothing).
fn is_idempotent(method: &Method, path: &str) -> bool {
    *method == Method::GET || matches!(path, "/read_file" | "/write_file" | "/close")
}

/// A failed exchange, with whether the request may have reached the server.
pub(crate) struct ExchangeError {
    error: Error,
    connected: bool,
    /// It went out on a pooled connection that ended before any answer.
    stale: bool,
}

impl ExchangeError {
    /// The error, retryable only if the connection was never made.
    fn connect_only(self) -> Error {
        match self.error {
            Error::Sandbox {
                backend,
                message,
                retryable: true,
                source,
            } if self.connected => Error::Sandbox {
                backend,
                message,
                retryable: false,
                source,
            },
            other => other,
        }
    }
}

impl From<ExchangeError> for Error {
    fn from(e: ExchangeError) -> Self {
        e.error
    }
}

fn attach<'a>(request: RequestBuilder, body: &Body<'a>) -> Result<RequestBuilder> {
    Ok(match body {
        Body::Empty => request,
        Body::Json(value) => request.json(value),
        Body::Upload {
            data,
            file_name,
            target_path,
            unzip,
        } => {
            let len = data.len() as u64;
            let part = reqwest::multipart::Part::stream_with_length(
                reqwest::Body::from(data.clone()),
                len,
            )
            .file_name((*file_name).to_owned());
            let part = if *unzip {
                part.mime_str("application/zip")
                    .map_err(|e| Error::internal(format!("bad upload content type: {e}")))?
            } else {
                part
            };
            let form = reqwest::multipart::Form::new()
                .part("file", part)
                .text("target_path", (*target_path).to_owned())
                .text("unzip", if *unzip { "true" } else { "false" });
            request.multipart(form)
        }
    })
}

/// Whether the peer reset the connection before any answer: a reset (or a broken pipe) while
/// sending means the server's socket was already closed, or closed with our request still
/// unread in it (a pooled connection the server had dropped, typically). Either way no server
/// ran the request. A server that read the request and then died closes cleanly instead
/// ("connection closed before message completed"), which is not retried.
fn never_read(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            );
        }
        source = cause.source();
    }
    false
}

/// A random UUID version 4 in its canonical text form, as SWE-ReX sends.
pub(crate) fn request_id() -> String {
    let mut n = fastrand::u128(..);
    n = (n & !(0xF << 76)) | (0x4 << 76); // version 4
    n = (n & !(0x3 << 62)) | (0x2 << 62); // RFC 4122 variant
    let hex = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_uuid4_and_distinct() {
        let a = request_id();
        let b = request_id();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{a}");
        assert!(
            matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
            "{a}"
        );
    }
}
