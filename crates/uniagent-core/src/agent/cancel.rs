//! [`CancelToken`]: a cloneable handle that tells every rollout of a run to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    notify: Notify,
}

/// A cancellation handle. Clones share the same state; cancelling one cancels all, once and
/// for good.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use uniagent_core::agent::CancelToken;
/// let token = CancelToken::new();
/// let waiter = token.clone();
/// let task = tokio::spawn(async move { waiter.cancelled().await; "stopped" });
/// token.cancel();
/// assert_eq!(task.await.unwrap(), "stopped");
/// assert!(token.is_cancelled());
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: every current and future [`cancelled`](Self::cancelled) wait completes.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Completes once the token is cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Register before checking the flag, so a cancel between the two is not missed.
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn already_cancelled_token_completes_at_once() {
        let t = CancelToken::new();
        t.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(1), t.cancelled())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn many_waiters_are_all_woken() {
        let t = CancelToken::new();
        let waiters: Vec<_> = (0..50)
            .map(|_| {
                let t = t.clone();
                tokio::spawn(async move { t.cancelled().await })
            })
            .collect();
        tokio::task::yield_now().await;
        t.cancel();
        for w in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(1), w)
                .await
                .unwrap()
                .unwrap();
        }
    }
}
