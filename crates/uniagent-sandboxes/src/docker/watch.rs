//! Explaining failures of a running sandbox: OOM kills, an exceeded lifetime, a container that
//! stopped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use uniagent_core::sandbox::ReadFileRequest;
use uniagent_core::{Error, Result};

use super::engine::sandbox_error;
use super::startup::container_stopped;
use crate::client::RemoteRuntime;

/// Exit codes of a process killed by SIGKILL (shell convention, and the raw signal).
pub(crate) const KILLED_CODES: [i64; 2] = [137, -9];

/// What the operations need to explain a failure.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    pub(crate) runtime: RemoteRuntime,
    pub(crate) docker: Docker,
    pub(crate) id: String,
    pub(crate) expired: Arc<AtomicBool>,
    /// Set once the expired container's removal has finished (or failed).
    pub(crate) removed: Arc<AtomicBool>,
    pub(crate) oom_kills: Arc<AtomicU64>,
    pub(crate) lifetime: Option<Duration>,
    pub(crate) memory_bytes: Option<u64>,
}

impl Watch {
    /// The kernel's OOM kill count for the container's memory cgroup, read from inside
    /// (cgroup v1 `memory.oom_control`, v2 `memory.events`).
    pub(crate) async fn read_oom_kills(&self) -> Option<u64> {
        for (path, key) in [
            ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
            ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ] {
            let Ok(file) = self.runtime.read_file(&ReadFileRequest::new(path)).await else {
                continue;
            };
            if let Some(count) = file.content.lines().find_map(|line| {
                let (name, value) = line.split_once(' ')?;
                (name == key).then(|| value.trim().parse().ok()).flatten()
            }) {
                return Some(count);
            }
        }
        None
    }

    fn oom_error(&self, operation: &str) -> Error {
        sandbox_error(format!(
            "{operation}: out of memory: the container hit its memory limit{} and the kernel's \
             OOM killer killed a process",
            self.memory_bytes
                .map(|b| format!(" of {b} bytes"))
                .unwrap_or_default()
        ))
    }

    /// A process ended by SIGKILL: an OOM kill if the cgroup's count went up.
    pub(crate) async fn check_killed(&self, operation: &str, exit_code: Option<i64>) -> Result<()> {
        if !exit_code.is_some_and(|c| KILLED_CODES.contains(&c)) {
            return Ok(());
        }
        let now = match self.read_oom_kills().await {
            Some(count) => count,
            None => {
                return match container_stopped(&self.docker, &self.id).await {
                    Some(why) => Err(sandbox_error(format!("{operation}: {why}"))),
                    None => Ok(()),
                }
            }
        };
        if now > self.oom_kills.swap(now, Ordering::SeqCst) {
            return Err(self.oom_error(operation));
        }
        Ok(())
    }

    /// Explains an infrastructure error: lifetime exceeded, OOM, container gone.
    pub(crate) async fn explain(&self, operation: &str, error: Error) -> Error {
        if matches!(error, Error::Runtime { .. }) {
            return error;
        }
        if self.expired.load(Ordering::SeqCst) {
            // The command failed because the container is being removed: report once it is
            // gone, so the caller never sees a half-removed sandbox (bounded wait).
            for _ in 0..500 {
                if self.removed.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return sandbox_error(format!(
                "{operation}: the sandbox outlived its lifetime limit of {:?} and was removed",
                self.lifetime.unwrap_or_default()
            ));
        }
        match container_stopped(&self.docker, &self.id).await {
            Some(why) if why.contains("OOM") => self.oom_error(operation),
            Some(why) => sandbox_error(format!("{operation}: {why} ({error})")),
            None => error,
        }
    }
}
