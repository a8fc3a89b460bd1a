//! The controller: the agent-sandbox controllers (warm pools, sandboxes, claims), the garbage
//! collector and a kubelet that runs each pod as a `uniagent-sandbox` process on its own
//! loopback address. One reconcile pass over a snapshot of the store runs after every change
//! and every [`TICK`].

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

#[cfg(feature = "docker")]
use super::containers::Containers;
use super::faults::{FaultState, SandboxFault};
use super::process::{Processes, SANDBOX_PORT};
use super::store::{
    deleting, finalizers_of, name_of, namespace_of, owners, uid_of, Propagation, Resource, Store,
    FOREGROUND_FINALIZER,
};
use super::util::{
    condition, condition_true, find_condition, keep_transition_times, lock, now_rfc3339, parse_time,
};
use super::PodRunner;

mod claims;
mod containers;
mod gc;
mod kubelet;
mod pools;
mod sandboxes;
mod view;

use kubelet::*;
use view::*;

/// The longest wait between two passes (time-driven changes: delays, `shutdownTime`).
const TICK: Duration = Duration::from_millis(25);

/// How long a claim waits for a starting warm sandbox before it cold-starts one (the real
/// controller's 2 s wait for a candidate's pod IP).
const CANDIDATE_WAIT: Duration = Duration::from_secs(2);

/// Label on sandboxes: `warm` (made for a pool) or `cold` (made for a claim).
pub const LAUNCH_TYPE_LABEL: &str = "agents.x-k8s.io/launch-type";

/// Label on sandboxes and pods: a hash of the sandbox name.
pub const NAME_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-name-hash";

/// Annotation on a sandbox naming its pod.
pub const POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";

/// Annotation on a sandbox naming the template it came from.
pub const TEMPLATE_REF_ANNOTATION: &str = "agents.x-k8s.io/sandbox-template-ref";

/// Settings of the controller.
#[derive(Debug, Clone)]
pub(crate) struct ControllerConfig {
    pub(crate) adopt_delay: Duration,
    pub(crate) cold_delay: Duration,
    pub(crate) server_binary: PathBuf,
    pub(crate) default_key_file: PathBuf,
    pub(crate) work_dir: PathBuf,
    pub(crate) loopback_octet: u8,
    pub(crate) pods: PodRunner,
}

#[derive(Debug, Default)]
struct Memory {
    /// When each claim (by uid) was first seen.
    first_seen: HashMap<String, Instant>,
    /// Extra start delay for a sandbox's pod (cold starts), by (namespace, sandbox name).
    delays: HashMap<(String, String), Duration>,
    next_ip: u32,
}

/// State shared by the reconcile loop and the per-pod tasks.
#[derive(Debug)]
pub(crate) struct Shared {
    runtimes: Mutex<HashMap<(String, String), PodRuntime>>,
    memory: Mutex<Memory>,
    wake: Notify,
    pub(crate) processes: Processes,
    #[cfg(feature = "docker")]
    pub(crate) containers: Containers,
}

/// The controller: its settings, the store it reconciles, and its loop (stoppable, as a crash).
#[derive(Debug)]
pub(crate) struct ControllerHandle {
    config: ControllerConfig,
    store: Arc<Store>,
    faults: Arc<FaultState>,
    pub(crate) shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

fn owner_ref(resource: Resource, object: &Value) -> Value {
    json!({
        "apiVersion": resource.api_version(),
        "kind": resource.kind(),
        "name": name_of(object),
        "uid": uid_of(object),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The uid of the object's controller owner reference.
fn controller_uid(object: &Value) -> Option<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .and_then(|r| r["uid"].as_str())
}

fn name_hash(name: &str) -> String {
    // FNV-1a, 32 bits: a stable label value for any name.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

fn generation(object: &Value) -> u64 {
    object["metadata"]["generation"].as_u64().unwrap_or(1)
}

fn rv_key(object: &Value) -> u64 {
    super::store::rv_of(object)
}

fn without_nulls(mut status: Value) -> Value {
    if let Some(map) = status.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    status
}

/// `new` with the conditions' transition times kept from `old` where the status is unchanged
/// (and the pod's `startTime` kept).
fn with_kept_times(old: &Value, mut new: Value) -> Value {
    if let Some(conditions) = new["conditions"].as_array().cloned() {
        new["conditions"] = Value::Array(keep_transition_times(&old["conditions"], conditions));
    }
    if old["startTime"].is_string() && new["startTime"].is_string() {
        new["startTime"] = old["startTime"].clone();
    }
    new
}

impl ControllerHandle {
    pub(crate) fn new(
        config: ControllerConfig,
        store: Arc<Store>,
        faults: Arc<FaultState>,
    ) -> Self {
        let processes = Processes::new();
        ControllerHandle {
            config,
            store,
            faults,
            shared: Arc::new(Shared {
                runtimes: Mutex::new(HashMap::new()),
                memory: Mutex::new(Memory {
                    next_ip: 1,
                    ..Memory::default()
                }),
                wake: Notify::new(),
                #[cfg(feature = "docker")]
                containers: Containers::new(super::container_run_id(processes.fake_id())),
                processes,
            }),
            task: Mutex::new(None),
        }
    }

    /// Starts the reconcile loop (no-op if running).
    pub(crate) fn start(self: &Arc<Self>) {
        let mut task = lock(&self.task);
        if task.is_some() {
            return;
        }
        let me = Arc::downgrade(self);
        let changed = self.store.changed();
        *task = Some(tokio::spawn(async move {
            loop {
                let Some(controller) = me.upgrade() else {
                    return;
                };
                let shared = controller.shared.clone();
                // Off the async workers: a pass over thousands of objects would otherwise stall
                // the API server's and the clients' tasks sharing them.
                if tokio::task::spawn_blocking(move || controller.reconcile())
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::select! {
                    _ = changed.notified() => {}
                    _ = shared.wake.notified() => {}
                    _ = tokio::time::sleep(TICK) => {}
                }
            }
        }));
    }

    /// Stops the reconcile loop, as a crashed controller: pods keep running, nothing is
    /// reconciled until [`start`](Self::start).
    pub(crate) fn stop(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }

    /// Whether the loop runs.
    pub(crate) fn running(&self) -> bool {
        lock(&self.task).is_some()
    }

    /// Stops the loop and kills every sandbox process (and removes every container).
    pub(crate) fn shutdown(&self) {
        self.stop();
        self.shared.processes.kill_all();
        #[cfg(feature = "docker")]
        self.shared.containers.remove_all();
    }

    fn view(&self) -> View {
        let (objects, _) = self.store.snapshot();
        View::new(objects)
    }

    /// One pass over everything.
    pub(crate) fn reconcile(&self) {
        // Two snapshots a pass: one for the garbage collector, the kubelet, sandboxes and pools,
        // a fresh one for claims, so that a claim binds to the newest sandbox states.
        let view = self.view();
        self.collect_garbage(&view);
        self.run_pods(&view);
        self.sync_sandboxes(&view);
        self.sync_pools(&view);
        self.sync_claims(&self.view());
    }

    fn set_status(&self, resource: Resource, object: &Value, status: Value) {
        if object["status"] == status {
            return;
        }
        let _ = self
            .store
            .modify(resource, namespace_of(object), name_of(object), |current| {
                current["status"] = status;
                Ok(())
            });
    }

    /// The run id (docker backend label) of this fake's pod containers.
    pub(crate) fn container_run_id(&self) -> String {
        super::container_run_id(self.shared.processes.fake_id())
    }

    /// How many pod containers were started ([`PodRunner::Docker`]).
    pub(crate) fn containers_started(&self) -> u64 {
        #[cfg(feature = "docker")]
        return self.shared.containers.started();
        #[cfg(not(feature = "docker"))]
        0
    }

    /// How many sandbox processes (or containers) run.
    pub(crate) fn process_count(&self) -> usize {
        #[cfg(feature = "docker")]
        let containers = self.shared.containers.count();
        #[cfg(not(feature = "docker"))]
        let containers = 0;
        self.shared.processes.count() + containers
    }
}
