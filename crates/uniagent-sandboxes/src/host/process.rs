//! The server child process: spawned in its own process group, killed with everything it started
//! on stop and on drop.
//!
//! Two nets catch the processes a sandbox leaves behind:
//! 1. **The process group.** The server runs in a new group (`process_group(0)`); stopping signals
//!    the whole group (SIGTERM, a grace period, SIGKILL).
//! 2. **An environment marker.** Every process inherits `UNIAGENT_SANDBOX_INSTANCE=<random id>`
//!    from the server, including shells that moved to their own session for their pty and
//!    background jobs that did `setsid`. After the group is gone, `/proc` is swept for that
//!    marker and whatever still carries it is killed. A process started with a replaced
//!    environment (`execute` with `env`) that also left the group escapes both nets.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use uniagent_core::{Error, Result};

/// The environment variable carrying a deployment's instance id into every process it starts.
pub const INSTANCE_ENV: &str = "UNIAGENT_SANDBOX_INSTANCE";

/// The environment variable naming the process that owns a deployment: `<pid>:<start time>`
/// (start time in clock ticks since boot, so a reused pid does not count as the owner).
pub const OWNER_ENV: &str = "UNIAGENT_SANDBOX_OWNER";

/// The environment variable `uniagent-sandbox` reads its token from.
const TOKEN_ENV: &str = "UNIAGENT_SANDBOX_TOKEN";

/// This process's [`OWNER_ENV`] value.
fn owner_mark() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", start_time(pid).unwrap_or(0))
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/PID/stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state); field 22 is the 20th after it.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Kills the processes of host deployments whose owner is gone (SIGKILLed before it could
/// clean up): every process marked with [`INSTANCE_ENV`] whose [`OWNER_ENV`] names a process
/// that no longer exists. Returns how many were signalled.
pub fn sweep_orphaned_instances() -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut stale = std::collections::BTreeSet::new();
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let value = |key: &str| {
            environ.split(|&b| b == 0).find_map(|entry| {
                let entry = std::str::from_utf8(entry).ok()?;
                entry
                    .strip_prefix(key)?
                    .strip_prefix('=')
                    .map(str::to_owned)
            })
        };
        let (Some(instance), Some(owner)) = (value(INSTANCE_ENV), value(OWNER_ENV)) else {
            continue;
        };
        let Some((owner_pid, owner_start)) = owner.split_once(':') else {
            continue;
        };
        let (Ok(owner_pid), Ok(owner_start)) =
            (owner_pid.parse::<u32>(), owner_start.parse::<u64>())
        else {
            continue;
        };
        if start_time(owner_pid) != Some(owner_start) {
            stale.insert(instance);
        }
    }
    stale
        .iter()
        .map(|instance| kill_marked_processes(INSTANCE_ENV, instance))
        .sum()
}

/// How long stopping waits for the server to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// What to start.
pub(crate) struct Launch<'a> {
    pub binary: &'a Path,
    pub port: u16,
    pub token: &'a str,
    pub work_dir: &'a Path,
    pub home_dir: &'a Path,
    pub log_file: &'a Path,
    pub instance_id: &'a str,
    pub env: &'a std::collections::BTreeMap<String, String>,
}

/// A running server; killed (group and marked processes) when dropped.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    pgid: Option<Pid>,
    instance_id: String,
    log_file: PathBuf,
}

impl ServerProcess {
    /// Spawns the server with `--host 127.0.0.1 --port P --auth-token T` in its work dir, with
    /// `TERM` unset, `HOME` set to an empty directory and output going to the log file.
    pub(crate) fn spawn(launch: &Launch<'_>) -> Result<Self> {
        let log = std::fs::File::create(launch.log_file)
            .map_err(|e| Error::io(format!("creating {}", launch.log_file.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| Error::io("duplicating the server log handle", e))?;
        let mut command = Command::new(launch.binary);
        command
            .arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(launch.port.to_string())
            .arg("--exit-with-parent")
            .current_dir(launch.work_dir)
            .env_remove("TERM")
            .env("HOME", launch.home_dir)
            .envs(launch.env)
            .env(INSTANCE_ENV, launch.instance_id)
            .env(OWNER_ENV, owner_mark())
            // Not on the command line, which every user can read in `ps`.
            .env(TOKEN_ENV, launch.token)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| {
            Error::io(
                format!("starting the sandbox server {}", launch.binary.display()),
                e,
            )
        })?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        Ok(Self {
            child,
            pgid,
            instance_id: launch.instance_id.to_owned(),
            log_file: launch.log_file.to_path_buf(),
        })
    }

    /// The server's process id (also its process group id).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pgid.and_then(|p| u32::try_from(p.as_raw()).ok())
    }

    /// The value of [`INSTANCE_ENV`] given to this server.
    pub(crate) fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// `Some(description)` when the server has exited.
    pub(crate) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot query the server process: {e}")),
        }
    }

    /// The last lines the server wrote, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read(&self.log_file)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Graceful stop: SIGTERM to the group, up to [`TERM_GRACE`] for the server to exit, then
    /// SIGKILL to the group and the marker sweep.
    pub(crate) async fn stop(mut self) {
        self.signal_group(Signal::SIGTERM);
        let _ = tokio::time::timeout(TERM_GRACE, self.child.wait()).await;
        self.kill_everything();
        let _ = self.child.wait().await;
    }

    fn signal_group(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH (the group is already gone) is the expected outcome of a repeated kill.
            let _ = killpg(pgid, signal);
        }
    }

    /// SIGKILL to the group, then to every process still carrying the instance marker.
    fn kill_everything(&mut self) {
        self.signal_group(Signal::SIGKILL);
        let _ = self.child.start_kill();
        kill_marked_processes(INSTANCE_ENV, &self.instance_id);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill_everything();
        // A zombie left here is reaped by tokio's orphan queue (`kill_on_drop`).
    }
}

/// Kills (SIGKILL) every process whose environment holds `var=value`, repeating while new ones
/// appear (a process may fork while being swept). Returns how many were signalled.
///
/// A process in the middle of `execve` briefly shows an empty environment, so one empty sweep
/// is not proof: the sweep ends only after two empty ones a few milliseconds apart.
pub fn kill_marked_processes(var: &str, value: &str) -> usize {
    kill_processes_marked_any(var, &HashSet::from([value.to_owned()]))
}

/// As [`kill_marked_processes`] for every value of `values` at once: one walk over `/proc` per
/// sweep, however many values (a fake cluster ending a thousand pods sweeps once, not a
/// thousand times).
pub fn kill_processes_marked_any(var: &str, values: &HashSet<String>) -> usize {
    let mut killed = 0;
    let mut empty_sweeps = 0;
    for _ in 0..20 {
        let found = processes_marked_any(var, values);
        if found.is_empty() {
            empty_sweeps += 1;
            if empty_sweeps == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            continue;
        }
        empty_sweeps = 0;
        for pid in found {
            if nix::sys::signal::kill(pid, Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

/// Live processes (not zombies) whose environment holds `needle` as one `KEY=value` entry.
pub fn marked_processes(needle: &str) -> Vec<Pid> {
    match needle.split_once('=') {
        Some((var, value)) => processes_marked_any(var, &HashSet::from([value.to_owned()])),
        None => Vec::new(),
    }
}

/// Live processes (not zombies) whose environment sets `var` to one of `values`.
fn processes_marked_any(var: &str, values: &HashSet<String>) -> Vec<Pid> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let prefix = format!("{var}=");
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|&pid| {
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                return false;
            };
            environ
                .split(|&b| b == 0)
                .filter_map(|entry| entry.strip_prefix(prefix.as_bytes()))
                .any(|value| std::str::from_utf8(value).is_ok_and(|v| values.contains(v)))
                && !is_zombie(pid)
        })
        .filter_map(|pid| i32::try_from(pid).ok().map(Pid::from_raw))
        .collect()
}

fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the parenthesised command name, which may itself contain spaces.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|s| s == "Z")
}
