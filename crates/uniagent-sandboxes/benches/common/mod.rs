//! What the Docker and pool benchmarks measure alike.

use std::future::Future;
use std::time::{Duration, Instant};

use uniagent_core::{Deployment, DeploymentExt};

/// From `start` to the first command's answer: what a rollout waits before its agent can act.
pub async fn start_to_first_command<D: Deployment>(sandbox: &D) -> Duration {
    let t0 = Instant::now();
    sandbox
        .start()
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
    let out = sandbox
        .sh("echo ok", Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("first command: {e}"));
    assert_eq!(out.stdout, "ok\n");
    t0.elapsed()
}

/// A benchmark's `main`: runs `future` on a multi-threaded runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
        .block_on(future)
}
