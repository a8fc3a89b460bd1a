//! Telling whether a request went out on a pooled keep-alive connection.
//!
//! A server may close an idle keep-alive connection at any moment: uvicorn does after its keep-
//! alive timeout, and right after every answer whose handler raised (every SWE-ReX 511). A
//! request written onto such a connection before the client noticed the close meets an end of
//! stream and never reaches the application. That failure is safe to resend under the same
//! `X-Request-ID`, the rule Go's `net/http` applies to requests that carry an idempotency key.
//! reqwest does not say which connection a request used, so [`Pooled`] counts the connections
//! the client opens: an exchange during which none was opened went out on one that was already
//! open.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// The number of connections a client has started to open, shared by its connector.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pooled {
    opened: Arc<AtomicU64>,
}

impl Pooled {
    /// A mark to compare with [`Pooled::none_opened_since`] after an exchange.
    pub(crate) fn mark(&self) -> u64 {
        self.opened.load(Ordering::SeqCst)
    }

    /// Whether no connection was opened since `mark`: an exchange that ran entirely in between
    /// used a connection that was open before it started. Concurrent exchanges only make this
    /// false more often, never wrongly true.
    pub(crate) fn none_opened_since(&self, mark: u64) -> bool {
        self.opened.load(Ordering::SeqCst) == mark
    }
}

impl<S> tower_layer::Layer<S> for Pooled {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Counting<S> {
        Counting {
            inner,
            opened: self.opened.clone(),
        }
    }
}

/// The connector wrapped by [`Pooled`]: every call opens one connection.
#[derive(Debug, Clone)]
pub(crate) struct Counting<S> {
    inner: S,
    opened: Arc<AtomicU64>,
}

impl<S, R> tower_service::Service<R> for Counting<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.opened.fetch_add(1, Ordering::SeqCst);
        self.inner.call(request)
    }
}

/// Whether `e` is an end of stream before the answer's head was complete (hyper's incomplete
/// message), as opposed to a reset, a deadline or a malformed answer.
pub(crate) fn closed_before_answer(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>() {
            return hyper.is_incomplete_message();
        }
        source = cause.source();
    }
    false
}
