//! One process of a session (the harness, or its reward command): spawned in its own process
//! group, waited for with a wall-clock limit, and its whole group killed afterwards, also on
//! timeout, on cancel and on panic.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::Command;

/// How a process ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// It exited (or was killed by a signal it did not get from us).
    Exited(ExitStatus),
    /// It ran past its limit; its group was killed.
    TimedOut,
}

/// What to run.
#[derive(Debug)]
pub(super) struct Launch<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    pub env: &'a [(String, String)],
    /// Where stdout goes (stderr goes to `log`).
    pub stdout: PathBuf,
    pub log: PathBuf,
    pub timeout: Duration,
}

/// Kills a process group when dropped, unless disarmed: the cleanup that also runs when the
/// session's future is cancelled or panics.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH: the group is already gone.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `launch`; `Err` when it cannot be started at all.
pub(super) async fn run(launch: Launch<'_>) -> std::io::Result<Ended> {
    let (program, args) = launch
        .argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    let stdout = std::fs::File::create(&launch.stdout)?;
    let log = std::fs::File::create(&launch.log)?;
    let mut child = Command::new(program)
        .args(args)
        .current_dir(launch.cwd)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let mut group = GroupGuard(
        child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw),
    );
    let ended = match tokio::time::timeout(launch.timeout, child.wait()).await {
        Ok(status) => Ended::Exited(status?),
        Err(_) => Ended::TimedOut,
    };
    // Whatever it left running in its group goes too.
    group.kill();
    if matches!(ended, Ended::TimedOut) {
        let _ = child.wait().await;
    }
    Ok(ended)
}

/// The last `max` bytes of a log file, for error messages.
pub(super) fn tail(path: &Path, max: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}
