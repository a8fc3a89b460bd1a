//! Async clean-up from synchronous code.

use std::future::Future;

/// Runs `work` to completion from a `Drop`: on a fresh thread with its own current-thread runtime
/// (blocking on the caller's runtime would panic inside it), joined before returning.
pub(crate) fn block_on_own_thread(work: impl Future<Output = ()> + Send + 'static) {
    let worker = std::thread::spawn(move || {
        if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            runtime.block_on(work);
        }
    });
    let _ = worker.join();
}
