//! The sandbox processes ("containers"): `uniagent-sandbox` children, each in its own process
//! group and carrying two environment markers, so that killing one pod, or the whole fake, also
//! reaches shells and jobs the server started in groups and sessions of their own.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::host::{kill_marked_processes, kill_processes_marked_any, INSTANCE_ENV};

use super::util::{lock, random_suffix};

/// The environment variable every process of one fake carries (value: the fake's id).
pub(crate) const FAKE_ENV: &str = "UNIAGENT_K8S_FAKE";

/// The port every sandbox listens on, as the template's container does.
pub const SANDBOX_PORT: u16 = 8000;

/// The processes one fake started: pid → the pod's instance marker.
#[derive(Debug)]
pub(crate) struct Processes {
    fake_id: String,
    running: Mutex<HashMap<i32, String>>,
    strays: Arc<Strays>,
}

/// Pods whose stray processes (children that left the server's group) are still to be killed,
/// swept together by one thread: a walk over `/proc` per batch, not per pod, and none on the
/// reconcile loop.
#[derive(Debug, Default)]
struct Strays {
    /// Instance markers waiting for a sweep, and whether a sweeper thread runs.
    queue: Mutex<(HashSet<String>, bool)>,
}

impl Strays {
    fn sweep_later(self: &Arc<Self>, instance: String) {
        let mut queue = lock(&self.queue);
        queue.0.insert(instance);
        if queue.1 {
            return;
        }
        queue.1 = true;
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("k8s-fake-strays".into())
            .spawn(move || loop {
                let batch = {
                    let mut queue = lock(&me.queue);
                    if queue.0.is_empty() {
                        queue.1 = false;
                        return;
                    }
                    std::mem::take(&mut queue.0)
                };
                kill_processes_marked_any(INSTANCE_ENV, &batch);
            });
        if spawned.is_err() {
            // No thread: sweep here rather than leave strays.
            queue.1 = false;
            let batch = std::mem::take(&mut queue.0);
            drop(queue);
            kill_processes_marked_any(INSTANCE_ENV, &batch);
        }
    }
}

impl Processes {
    pub(crate) fn new() -> Self {
        Processes {
            fake_id: format!("{}-{}", std::process::id(), random_suffix(10)),
            running: Mutex::new(HashMap::new()),
            strays: Arc::default(),
        }
    }

    /// The id every process (and container) of this fake is marked with.
    pub(crate) fn fake_id(&self) -> &str {
        &self.fake_id
    }

    /// Starts `uniagent-sandbox` for pod `name` on `ip`:[`SANDBOX_PORT`] in `working_dir`,
    /// accepting tokens signed by a key of `key_file` and naming `name`; stderr goes to `log`.
    pub(crate) fn spawn(
        &self,
        binary: &Path,
        ip: Ipv4Addr,
        name: &str,
        key_file: &Path,
        log: &Path,
        working_dir: &Path,
    ) -> std::io::Result<(Child, i32)> {
        let instance = format!("{}-{name}", self.fake_id);
        let stderr = std::fs::File::create(log)?;
        // As a container runtime does, a missing working directory is created.
        std::fs::create_dir_all(working_dir)?;
        let child = Command::new(binary)
            .current_dir(working_dir)
            .arg("--host")
            .arg(ip.to_string())
            .arg("--port")
            .arg(SANDBOX_PORT.to_string())
            .arg("--auth-public-key-file")
            .arg(key_file)
            .arg("--sandbox-name")
            .arg(name)
            .arg("--exit-with-parent")
            .env_remove("UNIAGENT_SANDBOX_TOKEN")
            .env_remove("UNIAGENT_SANDBOX_NAME")
            .env(INSTANCE_ENV, &instance)
            .env(FAKE_ENV, &self.fake_id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| std::io::Error::other("the sandbox exited at once"))?;
        lock(&self.running).insert(pid, instance);
        Ok((child, pid))
    }

    /// Kills the process group of `pid` now, and everything else carrying its marker soon.
    pub(crate) fn kill(&self, pid: i32) {
        let instance = lock(&self.running).get(&pid).cloned();
        if let Some(instance) = instance {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            self.strays.sweep_later(instance);
        }
    }

    /// Forgets `pid` once it has been reaped.
    pub(crate) fn exited(&self, pid: i32) {
        if let Some(instance) = lock(&self.running).remove(&pid) {
            // Children that left the group outlive their server otherwise.
            self.strays.sweep_later(instance);
        }
    }

    /// How many are running.
    pub(crate) fn count(&self) -> usize {
        lock(&self.running).len()
    }

    /// Kills every process this fake started.
    pub(crate) fn kill_all(&self) {
        let pids: Vec<i32> = lock(&self.running).keys().copied().collect();
        for pid in pids {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        kill_marked_processes(FAKE_ENV, &self.fake_id);
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.kill_all();
    }
}
