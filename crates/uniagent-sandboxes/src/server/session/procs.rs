//! Process-group and session helpers: what the server kills when a command times out, when a
//! session closes, and when `execute` gives up on a child.

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Sends `signal` to process group `pgid`; a group that no longer exists is not an error.
pub(crate) fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 1 {
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

/// Sends `signal` to process `pid`; a process that no longer exists is not an error.
pub(crate) fn signal_process(pid: i32, signal: Signal) {
    if pid > 1 {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// The ids of live processes whose session id is `sid` (read from `/proc/<pid>/stat`).
pub(crate) fn processes_in_session(sid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if stat_session(&stat) == Some(sid) {
            found.push(pid);
        }
    }
    found
}

/// The session id (field 6) of a `/proc/<pid>/stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
pub(crate) fn stat_session(stat: &str) -> Option<i32> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields after the name: state, ppid, pgrp, session.
    after.split_whitespace().nth(3)?.parse().ok()
}

/// Kills (SIGKILL) every process of session `sid`, the leader included.
pub(crate) fn kill_session(sid: i32) {
    for pid in processes_in_session(sid) {
        signal_process(pid, Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_session_skips_odd_command_names() {
        let stat = "4242 (we ird) cmd)) S 1 4242 4240 0 -1 4194560 1 0";
        assert_eq!(stat_session(stat), Some(4240));
        assert_eq!(stat_session("garbage"), None);
    }

    #[test]
    fn our_own_session_contains_us() {
        let me = std::process::id() as i32;
        let sid = nix::unistd::getsid(None).map(|p| p.as_raw()).unwrap_or(-1);
        assert!(processes_in_session(sid).contains(&me));
    }
}
