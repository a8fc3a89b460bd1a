//! Who a sandbox belongs to, for every backend that labels what it creates: the run (one id per
//! process unless configured) and the owning process, identified so that pid reuse does not
//! fool a reaper.

use std::sync::OnceLock;

/// The environment variable that names the run id when the configuration does not.
pub const RUN_ID_ENV: &str = "UNIAGENT_RUN_ID";

/// The run id of this process: `configured`, else `$UNIAGENT_RUN_ID`, else a random id chosen
/// once per process (shared by every backend, so one process labels everything alike).
///
/// ```
/// assert_eq!(uniagent_sandboxes::owner::run_id(Some("exp-7")), "exp-7");
/// let id = uniagent_sandboxes::owner::run_id(None);
/// assert_eq!(id, uniagent_sandboxes::owner::run_id(None), "stable within a process");
/// ```
pub fn run_id(configured: Option<&str>) -> String {
    static RANDOM: OnceLock<String> = OnceLock::new();
    if let Some(id) = configured.filter(|id| !id.is_empty()) {
        return id.to_owned();
    }
    if let Some(id) = std::env::var(RUN_ID_ENV).ok().filter(|id| !id.is_empty()) {
        return id;
    }
    RANDOM
        .get_or_init(|| format!("run-{}", random_hex(6)))
        .clone()
}

/// `bytes` random bytes as lowercase hex.
pub(crate) fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", fastrand::u8(..)))
        .collect()
}

/// Identity of a process that survives pid reuse: host name, pid and start time in clock ticks
/// since boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Host name (`/proc/sys/kernel/hostname`).
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Start time of the process (field 22 of `/proc/<pid>/stat`).
    pub start_ticks: u64,
}

impl Owner {
    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id();
        Self {
            host: host_name(),
            pid,
            start_ticks: start_ticks(pid).unwrap_or_default(),
        }
    }

    /// Parses the value of docker's `dev.uniagent.owner` label.
    ///
    /// ```
    /// use uniagent_sandboxes::owner::Owner;
    /// let owner = Owner::parse("box:42:1000").unwrap();
    /// assert_eq!((owner.host.as_str(), owner.pid, owner.start_ticks), ("box", 42, 1000));
    /// assert!(Owner::parse("garbage").is_none());
    /// assert_eq!(Owner::parse(&owner.label()), Some(owner));
    /// ```
    pub fn parse(label: &str) -> Option<Self> {
        Self::parse_separated(label, ':')
    }

    /// Parses `host.pid.start-ticks` ([`dotted`](Self::dotted), the k8s owner label).
    ///
    /// ```
    /// use uniagent_sandboxes::owner::Owner;
    /// let owner = Owner::parse_dotted("worker-0.ns.4242.99").unwrap();
    /// assert_eq!((owner.host.as_str(), owner.pid, owner.start_ticks), ("worker-0.ns", 4242, 99));
    /// assert_eq!(Owner::parse_dotted(&owner.dotted()), Some(owner));
    /// ```
    pub fn parse_dotted(label: &str) -> Option<Self> {
        Self::parse_separated(label, '.')
    }

    /// `host.pid.start-ticks`: the owner in the characters a Kubernetes label value allows.
    pub fn dotted(&self) -> String {
        format!("{}.{}.{}", self.host, self.pid, self.start_ticks)
    }

    fn parse_separated(label: &str, separator: char) -> Option<Self> {
        let mut parts = label.rsplitn(3, separator);
        let start_ticks = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let host = parts.next()?.to_owned();
        Some(Self {
            host,
            pid,
            start_ticks,
        })
    }

    /// The value of docker's `dev.uniagent.owner` label (`host:pid:start-ticks`).
    pub fn label(&self) -> String {
        format!("{}:{}:{}", self.host, self.pid, self.start_ticks)
    }

    /// Whether this owner runs on this host and is gone (its pid is free or reused by a
    /// process that started at another time). Owners on other hosts are never "gone".
    pub fn is_gone_here(&self) -> bool {
        self.host == host_name() && start_ticks(self.pid) != Some(self.start_ticks)
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; the start time is field 22 overall.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_is_not_gone_and_a_dead_one_is() {
        let me = Owner::current();
        assert!(me.start_ticks > 0);
        assert!(!me.is_gone_here());
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut child = child;
        child.wait().unwrap();
        let dead = Owner { pid, ..me.clone() };
        assert!(dead.is_gone_here(), "an exited process is gone");
        let reused = Owner {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(reused.is_gone_here(), "same pid, other start time: gone");
        let elsewhere = Owner {
            host: format!("{}-other", me.host),
            pid,
            ..me
        };
        assert!(!elsewhere.is_gone_here(), "other hosts are never judged");
    }

    #[test]
    fn owner_labels_round_trip_with_colons_in_the_host() {
        let owner = Owner {
            host: "a:b".into(),
            pid: 7,
            start_ticks: 9,
        };
        assert_eq!(Owner::parse(&owner.label()), Some(owner));
    }
}
