//! The connection to the Docker Engine and the mapping of its errors into [`Error`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bollard::Docker;
use tokio::sync::OnceCell;
use uniagent_core::{Error, Result};

/// The backend name used in errors.
pub(crate) const BACKEND: &str = "docker";

/// Deadline of one Docker API request (container creation on a busy 2-core machine can take
/// seconds; 64 at once longer).
const API_TIMEOUT: Duration = Duration::from_secs(120);

static ENGINE: OnceCell<Docker> = OnceCell::const_new();

/// Docker API requests made so far (see [`daemon_calls`]).
static DAEMON_CALLS: AtomicU64 = AtomicU64::new(0);

/// How many Docker Engine API requests this process's docker backend has made so far (every
/// request of a deployment, from the image checks of `start` to the removal of `stop`, the
/// relay's execs, the reaper's), for metrics and tests. Read it before and after a workload: the
/// difference is that workload's load on the daemon.
pub fn daemon_calls() -> u64 {
    DAEMON_CALLS.load(Ordering::Relaxed)
}

/// Counts one Docker API request (called just before each).
pub(crate) fn count_call() {
    DAEMON_CALLS.fetch_add(1, Ordering::Relaxed);
}

/// A client of the local Docker Engine (`$DOCKER_HOST` or the default unix socket), with the API
/// version negotiated down to what the daemon speaks. Connected once per process and shared.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// let docker = uniagent_sandboxes::docker::engine().await?;
/// println!("{:?}", docker.client_version());
/// # Ok(()) }
/// ```
pub async fn engine() -> Result<Docker> {
    ENGINE
        .get_or_try_init(|| async {
            let docker = Docker::connect_with_local_defaults()
                .map_err(|e| docker_error("connecting to the Docker daemon", e))?
                .with_timeout(API_TIMEOUT);
            count_call();
            docker
                .negotiate_version()
                .await
                .map_err(|e| docker_error("reaching the Docker daemon", e))
        })
        .await
        .cloned()
}

/// Deadline of a ping: a daemon that takes longer to answer one is as good as absent.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// `Ok(())` when a Docker daemon answers a ping within seconds, else why not (for tests that
/// skip without one). A daemon that does not answer gives a retryable sandbox error.
pub async fn daemon_reachable() -> Result<()> {
    let docker = engine().await?;
    count_call();
    within("pinging the Docker daemon", PING_TIMEOUT, docker.ping())
        .await
        .map(|_| ())
}

/// Runs one Docker call under `deadline` (bollard's own timeout covers only the response's
/// head, not a streamed body): an error maps as [`docker_error`] does, an expired deadline to a
/// retryable sandbox error ([`daemon_timeout`]).
pub(crate) async fn within<T>(
    context: &str,
    deadline: Duration,
    call: impl std::future::Future<Output = std::result::Result<T, bollard::errors::Error>>,
) -> Result<T> {
    match tokio::time::timeout(deadline, call).await {
        Ok(answer) => answer.map_err(|e| docker_error(context, e)),
        Err(_) => Err(daemon_timeout(context, deadline)),
    }
}

/// The error of a Docker call that did not finish within `after`: retryable, since a busy or
/// wedged daemon may answer again later.
pub(crate) fn daemon_timeout(context: &str, after: Duration) -> Error {
    Error::Sandbox {
        backend: BACKEND.into(),
        message: format!("{context}: the Docker daemon did not answer within {after:?}"),
        retryable: true,
        source: None,
    }
}

/// Maps a bollard error into a sandbox error naming what we were doing. Connection-level
/// failures and daemon 5xx answers other than "no such image/container" are retryable.
pub(crate) fn docker_error(context: &str, error: bollard::errors::Error) -> Error {
    use bollard::errors::Error as E;
    let retryable = match &error {
        E::DockerResponseServerError { status_code, .. } => {
            *status_code >= 500 && *status_code != 501
        }
        E::HyperResponseError { .. } | E::IOError { .. } | E::RequestTimeoutError => true,
        _ => false,
    };
    Error::Sandbox {
        backend: BACKEND.into(),
        message: format!("{context}: {error}"),
        retryable,
        source: Some(Box::new(error)),
    }
}

/// A non-retryable sandbox error with a message.
pub(crate) fn sandbox_error(message: impl Into<String>) -> Error {
    Error::Sandbox {
        backend: BACKEND.into(),
        message: message.into(),
        retryable: false,
        source: None,
    }
}

/// True when the error is Docker's 404 (no such container, image or network).
pub(crate) fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}
