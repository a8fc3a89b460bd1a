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

use super::faults::{FaultState, SandboxFault};
use super::process::{Processes, SANDBOX_PORT};
use super::store::{
    deleting, finalizers_of, name_of, namespace_of, owners, uid_of, Propagation, Resource, Store,
    FOREGROUND_FINALIZER,
};
use super::util::{
    condition, condition_true, find_condition, keep_transition_times, lock, now_rfc3339, parse_time,
};

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
}

/// What the kubelet knows of one pod.
#[derive(Debug)]
struct PodRuntime {
    ip: Option<Ipv4Addr>,
    fault: SandboxFault,
    pid: Option<i32>,
    ready_not_before: Instant,
    listening: bool,
    exit_code: Option<i32>,
    spawn_error: Option<String>,
    started_at: String,
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

fn pod_condition(kind: &str, status: bool, reason: Option<&str>, message: Option<&str>) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": now_rfc3339(),
    });
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    if let Some(message) = message {
        c["message"] = json!(message);
    }
    c
}

/// A snapshot split by kind, indexed by (namespace, name), by controller and by owner, so that
/// a pass stays linear in the number of objects (a thousand claims are a few thousand objects).
struct View {
    by_kind: HashMap<Resource, Vec<Value>>,
    by_name: HashMap<(Resource, String, String), usize>,
    /// Objects by the uid of their controller owner reference.
    by_controller: HashMap<String, Vec<(Resource, usize)>>,
    /// Objects by the uid of each of their owner references.
    by_owner: HashMap<String, Vec<(Resource, usize)>>,
}

impl View {
    fn new(objects: Vec<(Resource, Value)>) -> Self {
        let mut view = View {
            by_kind: HashMap::new(),
            by_name: HashMap::new(),
            by_controller: HashMap::new(),
            by_owner: HashMap::new(),
        };
        for (resource, object) in objects {
            let list = view.by_kind.entry(resource).or_default();
            let at = list.len();
            view.by_name.insert(
                (
                    resource,
                    namespace_of(&object).to_owned(),
                    name_of(&object).to_owned(),
                ),
                at,
            );
            if let Some(uid) = controller_uid(&object) {
                view.by_controller
                    .entry(uid.to_owned())
                    .or_default()
                    .push((resource, at));
            }
            for uid in owners(&object) {
                view.by_owner.entry(uid).or_default().push((resource, at));
            }
            list.push(object);
        }
        view
    }

    fn of(&self, resource: Resource) -> &[Value] {
        self.by_kind
            .get(&resource)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn at(&self, (resource, at): (Resource, usize)) -> (Resource, &Value) {
        (resource, &self.of(resource)[at])
    }

    fn find(&self, resource: Resource, namespace: &str, name: &str) -> Option<&Value> {
        let key = (resource, namespace.to_owned(), name.to_owned());
        self.by_name.get(&key).map(|&at| &self.of(resource)[at])
    }

    /// The objects of kind `resource` whose controller is `uid`.
    fn controlled_by<'v>(
        &'v self,
        uid: &str,
        resource: Resource,
    ) -> impl Iterator<Item = &'v Value> + 'v {
        self.by_controller
            .get(uid)
            .into_iter()
            .flatten()
            .filter(move |(r, _)| *r == resource)
            .map(|&found| self.at(found).1)
    }

    /// Every object with an owner reference to `uid`.
    fn dependents<'v>(&'v self, uid: &str) -> impl Iterator<Item = (Resource, &'v Value)> + 'v {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .map(|&found| self.at(found))
    }
}

impl ControllerHandle {
    pub(crate) fn new(
        config: ControllerConfig,
        store: Arc<Store>,
        faults: Arc<FaultState>,
    ) -> Self {
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
                processes: Processes::new(),
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

    /// Stops the loop and kills every sandbox process.
    pub(crate) fn shutdown(&self) {
        self.stop();
        self.shared.processes.kill_all();
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

    /// Garbage collection: dependents of a deleted owner go (background); an owner deleted in
    /// the foreground waits for its dependents, then loses the `foregroundDeletion` finalizer.
    fn collect_garbage(&self, view: &View) {
        let all: Vec<(Resource, &Value)> = view
            .by_kind
            .iter()
            .flat_map(|(r, objects)| objects.iter().map(move |o| (*r, o)))
            .collect();
        let uids: HashSet<&str> = all.iter().map(|(_, o)| uid_of(o)).collect();
        for (resource, object) in &all {
            let refs = owners(object);
            if !refs.is_empty()
                && refs.iter().all(|uid| !uids.contains(uid.as_str()))
                && !deleting(object)
            {
                let _ = self.store.delete(
                    *resource,
                    namespace_of(object),
                    name_of(object),
                    Propagation::Background,
                    None,
                    None,
                );
            }
        }
        for (resource, object) in &all {
            if !deleting(object)
                || !finalizers_of(object)
                    .iter()
                    .any(|f| f == FOREGROUND_FINALIZER)
            {
                continue;
            }
            let dependents: Vec<(Resource, &Value)> = view.dependents(uid_of(object)).collect();
            if dependents.is_empty() {
                let _ = self.store.remove_finalizer(
                    *resource,
                    namespace_of(object),
                    name_of(object),
                    FOREGROUND_FINALIZER,
                );
            } else {
                for (dep_resource, dep) in dependents {
                    if !deleting(dep) {
                        let _ = self.store.delete(
                            dep_resource,
                            namespace_of(dep),
                            name_of(dep),
                            Propagation::Foreground,
                            None,
                            None,
                        );
                    }
                }
            }
        }
    }

    fn allocate_ip(&self) -> Ipv4Addr {
        let mut memory = lock(&self.shared.memory);
        let mut n = memory.next_ip;
        if n & 0xff == 0 {
            n += 1;
        }
        memory.next_ip = (n + 1) % 0x1_0000;
        let [_, _, hi, lo] = n.to_be_bytes();
        Ipv4Addr::new(127, self.config.loopback_octet, hi, lo)
    }

    /// The key file a pod's container reads: the template's `--auth-public-key-file` resolved
    /// through its volume mounts to a ConfigMap key, written to a file; else the fake's own.
    fn key_file_for(&self, pod: &Value) -> PathBuf {
        self.resolve_key_file(pod)
            .unwrap_or_else(|| self.config.default_key_file.clone())
    }

    fn resolve_key_file(&self, pod: &Value) -> Option<PathBuf> {
        let container = pod["spec"]["containers"].get(0)?;
        let words: Vec<&str> = container["command"]
            .as_array()
            .into_iter()
            .chain(container["args"].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let path = words.iter().enumerate().find_map(|(i, w)| {
            w.strip_prefix("--auth-public-key-file=")
                .map(str::to_string)
                .or_else(|| {
                    (*w == "--auth-public-key-file")
                        .then(|| words.get(i + 1).map(|s| s.to_string()))
                        .flatten()
                })
        })?;
        let mount = container["volumeMounts"]
            .as_array()?
            .iter()
            .filter(|m| {
                m["mountPath"]
                    .as_str()
                    .is_some_and(|p| path.starts_with(&format!("{}/", p.trim_end_matches('/'))))
            })
            .max_by_key(|m| m["mountPath"].as_str().map(str::len).unwrap_or(0))?;
        let mount_path = mount["mountPath"].as_str()?.trim_end_matches('/');
        let relative = path.strip_prefix(mount_path)?.trim_start_matches('/');
        let volume = pod["spec"]["volumes"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == mount["name"])?;
        let config_map = volume["configMap"]["name"].as_str()?;
        let key = volume["configMap"]["items"]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["path"] == relative))
            .and_then(|i| i["key"].as_str())
            .unwrap_or(relative);
        let namespace = namespace_of(pod);
        let data = self
            .store
            .get(Resource::ConfigMaps, namespace, config_map)?;
        let text = data["data"][key].as_str()?;
        let file = self.config.work_dir.join(format!(
            "keys-{namespace}-{config_map}-{}",
            key.replace('/', "_")
        ));
        if std::fs::read_to_string(&file).ok().as_deref() != Some(text) {
            std::fs::write(&file, text).ok()?;
        }
        Some(file)
    }

    fn spawn_process(
        &self,
        key: (String, String),
        ip: Ipv4Addr,
        pod: &Value,
    ) -> Result<i32, String> {
        let name = name_of(pod).to_string();
        let key_file = self.key_file_for(pod);
        let log = self
            .config
            .work_dir
            .join(format!("pod-{}-{name}.log", namespace_of(pod)));
        // Each pod has a file system of its own: its root is a directory of the fake's, and the
        // container's `workingDir` a path under it (created, as a container runtime does), so
        // sandboxes share no files through relative paths.
        let pod_root = self
            .config
            .work_dir
            .join(format!("pod-{}-{name}", namespace_of(pod)));
        let working_dir = match pod["spec"]["containers"][0]["workingDir"].as_str() {
            Some(dir) => pod_root.join(dir.trim_start_matches('/')),
            None => pod_root,
        };
        let (mut child, pid) = self
            .shared
            .processes
            .spawn(
                &self.config.server_binary,
                ip,
                &name,
                &key_file,
                &log,
                &working_dir,
            )
            .map_err(|e| format!("cannot start {}: {e}", self.config.server_binary.display()))?;
        if let Some(rt) = lock(&self.shared.runtimes).get_mut(&key) {
            rt.pid = Some(pid);
        }
        let shared = self.shared.clone();
        let wait_key = key.clone();
        tokio::spawn(async move {
            let code = match child.wait().await {
                Ok(status) => status.code().unwrap_or(137),
                Err(_) => -1,
            };
            shared.processes.exited(pid);
            if let Some(rt) = lock(&shared.runtimes).get_mut(&wait_key) {
                if rt.pid == Some(pid) {
                    rt.exit_code = Some(code);
                }
            }
            shared.wake.notify_one();
        });
        let shared = self.shared.clone();
        tokio::spawn(async move {
            loop {
                {
                    let runtimes = lock(&shared.runtimes);
                    match runtimes.get(&key) {
                        Some(rt) if rt.pid == Some(pid) && rt.exit_code.is_none() => {}
                        _ => return,
                    }
                }
                let connect = tokio::net::TcpStream::connect((ip, SANDBOX_PORT));
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
                    if let Some(rt) = lock(&shared.runtimes).get_mut(&key) {
                        rt.listening = true;
                    }
                    shared.wake.notify_one();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Ok(pid)
    }

    /// The kubelet: starts a process for every new pod, stops deleted pods' processes (then
    /// removes the pod), and reports each pod's status.
    fn run_pods(&self, view: &View) {
        let pods = view.of(Resource::Pods);
        let live: HashSet<(String, String)> = pods
            .iter()
            .map(|p| (namespace_of(p).to_string(), name_of(p).to_string()))
            .collect();
        // Processes whose pod vanished.
        let orphaned: Vec<i32> = {
            let mut runtimes = lock(&self.shared.runtimes);
            let gone: Vec<(String, String)> = runtimes
                .keys()
                .filter(|k| !live.contains(*k))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|k| {
                    runtimes
                        .remove(&k)
                        .and_then(|rt| rt.pid.filter(|_| rt.exit_code.is_none()))
                })
                .collect()
        };
        for pid in orphaned {
            self.shared.processes.kill(pid);
        }
        for pod in pods {
            let key = (namespace_of(pod).to_string(), name_of(pod).to_string());
            if deleting(pod) {
                let (pid, done) = match lock(&self.shared.runtimes).get(&key) {
                    Some(rt) => (
                        rt.pid.filter(|_| rt.exit_code.is_none()),
                        rt.pid.is_none() || rt.exit_code.is_some(),
                    ),
                    None => (None, true),
                };
                if let Some(pid) = pid {
                    self.shared.processes.kill(pid);
                }
                if done {
                    lock(&self.shared.runtimes).remove(&key);
                    self.store.remove_now(Resource::Pods, &key.0, &key.1);
                }
                continue;
            }
            let known = lock(&self.shared.runtimes).contains_key(&key);
            if !known {
                let fault = self.faults.sandbox_fault();
                let delay = lock(&self.shared.memory)
                    .delays
                    .remove(&key)
                    .unwrap_or_default();
                let ip = (fault != SandboxFault::Unschedulable).then(|| self.allocate_ip());
                let rt = PodRuntime {
                    ip,
                    fault,
                    pid: None,
                    ready_not_before: Instant::now() + delay,
                    listening: false,
                    exit_code: None,
                    spawn_error: None,
                    started_at: now_rfc3339(),
                };
                lock(&self.shared.runtimes).insert(key.clone(), rt);
                if let (SandboxFault::None, Some(ip)) = (fault, ip) {
                    if let Err(e) = self.spawn_process(key.clone(), ip, pod) {
                        if let Some(slot) = lock(&self.shared.runtimes).get_mut(&key) {
                            slot.spawn_error = Some(e);
                        }
                    }
                }
            }
            let status = {
                let runtimes = lock(&self.shared.runtimes);
                match runtimes.get(&key) {
                    Some(rt) => pod_status(pod, rt),
                    None => continue,
                }
            };
            let status = with_kept_times(&pod["status"], status);
            self.set_status(Resource::Pods, pod, status);
        }
    }

    /// Sandboxes: each gets its pod, and a status from it.
    fn sync_sandboxes(&self, view: &View) {
        for sandbox in view.of(Resource::Sandboxes) {
            let namespace = namespace_of(sandbox);
            let name = name_of(sandbox);
            let pod = view.find(Resource::Pods, namespace, name);
            if pod.is_none()
                && !deleting(sandbox)
                && sandbox["metadata"]["annotations"][POD_NAME_ANNOTATION].is_null()
            {
                self.create_pod(sandbox);
                continue;
            }
            let status = with_kept_times(&sandbox["status"], sandbox_status(sandbox, pod));
            self.set_status(Resource::Sandboxes, sandbox, status);
        }
    }

    fn create_pod(&self, sandbox: &Value) {
        let namespace = namespace_of(sandbox);
        let name = name_of(sandbox);
        let template = &sandbox["spec"]["podTemplate"];
        let mut labels = template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        labels[NAME_HASH_LABEL] = json!(name_hash(name));
        let mut spec = template["spec"].clone();
        if !spec.is_object() {
            spec = json!({"containers": [{"name": "sandbox", "image": "uniagent-sandbox"}]});
        }
        spec["nodeName"] = json!("fake-node");
        let mut metadata = json!({
            "name": name,
            "labels": labels,
            "ownerReferences": [owner_ref(Resource::Sandboxes, sandbox)],
        });
        if template["metadata"]["annotations"].is_object() {
            metadata["annotations"] = template["metadata"]["annotations"].clone();
        }
        let pod = json!({"metadata": metadata, "spec": spec});
        if self.store.create(Resource::Pods, namespace, pod).is_ok() {
            let _ = self
                .store
                .modify(Resource::Sandboxes, namespace, name, |s| {
                    s["metadata"]["annotations"][POD_NAME_ANNOTATION] = json!(name);
                    Ok(())
                });
        }
    }

    /// Warm pools: keep `spec.replicas` unclaimed sandboxes of the pool's template.
    fn sync_pools(&self, view: &View) {
        for pool in view.of(Resource::SandboxWarmPools) {
            if deleting(pool) {
                continue;
            }
            let namespace = namespace_of(pool);
            let uid = uid_of(pool);
            let replicas = pool["spec"]["replicas"].as_u64().unwrap_or(0) as usize;
            let template_name = pool["spec"]["sandboxTemplateRef"]["name"]
                .as_str()
                .unwrap_or("");
            let template = view.find(Resource::SandboxTemplates, namespace, template_name);
            let mut warm: Vec<&Value> = Vec::new();
            for sandbox in view.controlled_by(uid, Resource::Sandboxes) {
                if deleting(sandbox) {
                    continue;
                }
                if condition_true(&sandbox["status"]["conditions"], "Finished") {
                    // A warm sandbox whose process ended is replaced.
                    let _ = self.store.delete(
                        Resource::Sandboxes,
                        namespace,
                        name_of(sandbox),
                        Propagation::Background,
                        None,
                        None,
                    );
                } else {
                    warm.push(sandbox);
                }
            }
            if let Some(template) = template {
                for _ in warm.len()..replicas {
                    self.create_sandbox(pool, template, Resource::SandboxWarmPools, None, "warm");
                }
            }
            if warm.len() > replicas {
                // Not ready ones first, then the newest.
                warm.sort_by_key(|s| {
                    (
                        condition_true(&s["status"]["conditions"], "Ready"),
                        std::cmp::Reverse(
                            s["metadata"]["creationTimestamp"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                        ),
                    )
                });
                for extra in &warm[..warm.len() - replicas] {
                    let _ = self.store.delete(
                        Resource::Sandboxes,
                        namespace,
                        name_of(extra),
                        Propagation::Background,
                        None,
                        None,
                    );
                }
                warm.drain(..warm.len() - replicas);
            }
            let ready = warm
                .iter()
                .filter(|s| condition_true(&s["status"]["conditions"], "Ready"))
                .count();
            let mut status = pool["status"].clone();
            if !status.is_object() {
                status = json!({});
            }
            status["replicas"] = json!(warm.len());
            status["readyReplicas"] = json!(ready);
            status["observedGeneration"] = json!(generation(pool));
            status["selector"] = json!(format!("{TEMPLATE_REF_ANNOTATION}={template_name}"));
            self.set_status(Resource::SandboxWarmPools, pool, status);
        }
    }

    /// Creates a sandbox from `template`, owned by `owner` (a pool or a claim).
    fn create_sandbox(
        &self,
        owner: &Value,
        template: &Value,
        owner_kind: Resource,
        name: Option<&str>,
        launch: &str,
    ) -> Option<String> {
        let namespace = namespace_of(owner);
        let mut metadata = json!({
            "labels": {LAUNCH_TYPE_LABEL: launch},
            "annotations": {TEMPLATE_REF_ANNOTATION: name_of(template)},
            "ownerReferences": [owner_ref(owner_kind, owner)],
        });
        match name {
            Some(name) => metadata["name"] = json!(name),
            None => metadata["generateName"] = json!(format!("{}-", name_of(owner))),
        }
        let sandbox = json!({
            "metadata": metadata,
            "spec": {"podTemplate": template["spec"]["podTemplate"].clone()},
        });
        let created = match self
            .store
            .create(Resource::Sandboxes, namespace, sandbox.clone())
        {
            Ok(created) => created,
            Err(e) if e.code == 409 => {
                let mut retry = sandbox;
                if let Some(meta) = retry["metadata"].as_object_mut() {
                    meta.remove("name");
                    meta.insert("generateName".into(), json!(format!("{}-", name_of(owner))));
                }
                self.store
                    .create(Resource::Sandboxes, namespace, retry)
                    .ok()?
            }
            Err(_) => return None,
        };
        Some(name_of(&created).to_string())
    }

    /// Claims: adopt a ready warm sandbox or cold-start one, forward its conditions, enforce
    /// `shutdownTime`.
    fn sync_claims(&self, view: &View) {
        let now = Instant::now();
        let claims = view.of(Resource::SandboxClaims);
        {
            let live: HashSet<&str> = claims.iter().map(uid_of).collect();
            lock(&self.shared.memory)
                .first_seen
                .retain(|uid, _| live.contains(uid.as_str()));
        }
        let mut adopted: HashSet<String> = HashSet::new();
        for claim in claims {
            if deleting(claim) {
                continue;
            }
            let namespace = namespace_of(claim);
            let uid = uid_of(claim);
            let claim_generation = generation(claim);
            let first_seen = *lock(&self.shared.memory)
                .first_seen
                .entry(uid.to_string())
                .or_insert(now);
            let lifecycle = &claim["spec"]["lifecycle"];
            let expired = lifecycle["shutdownTime"]
                .as_str()
                .and_then(parse_time)
                .is_some_and(|t| Timestamp::now() >= t);
            let owned = view.controlled_by(uid, Resource::Sandboxes).next();
            if expired {
                if lifecycle["shutdownPolicy"] == "DeleteForeground" {
                    let _ = self.store.delete(
                        Resource::SandboxClaims,
                        namespace,
                        name_of(claim),
                        Propagation::Foreground,
                        None,
                        None,
                    );
                    continue;
                }
                if let Some(sandbox) = owned {
                    if !deleting(sandbox) {
                        let _ = self.store.delete(
                            Resource::Sandboxes,
                            namespace,
                            name_of(sandbox),
                            Propagation::Background,
                            None,
                            None,
                        );
                    }
                }
                let status = json!({
                    "conditions": [condition("Ready", false, "ClaimExpired", "Claim expired. Sandbox cleanup initiated.", claim_generation)],
                    "sandbox": {},
                });
                self.set_status(
                    Resource::SandboxClaims,
                    claim,
                    with_kept_times(&claim["status"], status),
                );
                continue;
            }
            let sandbox = match owned {
                Some(sandbox) => Some(sandbox),
                None => match self.bind(view, claim, first_seen, now, &mut adopted) {
                    Ok(sandbox) => sandbox,
                    Err((reason, message)) => {
                        let status = json!({
                            "conditions": [condition("Ready", false, reason, &message, claim_generation)],
                            "sandbox": claim["status"]["sandbox"].clone(),
                        });
                        self.set_status(
                            Resource::SandboxClaims,
                            claim,
                            with_kept_times(&claim["status"], without_nulls(status)),
                        );
                        continue;
                    }
                },
            };
            let status = claim_status(claim, sandbox, self.faults.claims_never_ready());
            self.set_status(
                Resource::SandboxClaims,
                claim,
                with_kept_times(&claim["status"], status),
            );
        }
    }

    /// Finds or makes a sandbox for an unbound claim: `Ok(Some)` adopted now, `Ok(None)`
    /// waiting (or a cold start just made), `Err((reason, message))` a Ready=False reason.
    fn bind<'v>(
        &self,
        view: &'v View,
        claim: &Value,
        first_seen: Instant,
        now: Instant,
        adopted: &mut HashSet<String>,
    ) -> Result<Option<&'v Value>, (&'static str, String)> {
        let namespace = namespace_of(claim);
        if !claim["status"]["sandbox"]["name"]
            .as_str()
            .unwrap_or("")
            .is_empty()
        {
            return Err(("SandboxMissing", "Sandbox does not exist".into()));
        }
        let pool_name = claim["spec"]["warmPoolRef"]["name"].as_str().unwrap_or("");
        let pool = view
            .find(Resource::SandboxWarmPools, namespace, pool_name)
            .filter(|p| !deleting(p))
            .ok_or_else(|| {
                (
                    "WarmPoolNotFound",
                    format!("SandboxWarmPool {pool_name:?} not found"),
                )
            })?;
        let template_name = pool["spec"]["sandboxTemplateRef"]["name"]
            .as_str()
            .unwrap_or("");
        let template = view
            .find(Resource::SandboxTemplates, namespace, template_name)
            .ok_or_else(|| {
                (
                    "TemplateNotFound",
                    format!("SandboxTemplate {template_name:?} not found"),
                )
            })?;
        let env_given = claim["spec"]["env"]
            .as_array()
            .is_some_and(|e| !e.is_empty());
        if env_given && template["spec"]["envVarsInjectionPolicy"] != "Allowed" {
            return Err((
                "EnvVarsInjectionRejected",
                format!("SandboxTemplate {template_name:?} does not allow environment variable injection"),
            ));
        }
        if now.duration_since(first_seen) < self.config.adopt_delay {
            return Ok(None);
        }
        let pool_uid = uid_of(pool);
        let candidates: Vec<&Value> = view
            .controlled_by(pool_uid, Resource::Sandboxes)
            .filter(|s| !deleting(s) && !adopted.contains(uid_of(s)))
            .collect();
        if !env_given {
            let ready = candidates
                .iter()
                .filter(|s| condition_true(&s["status"]["conditions"], "Ready"))
                .min_by_key(|s| rv_key(s));
            if let Some(sandbox) = ready {
                let claim_ref = owner_ref(Resource::SandboxClaims, claim);
                let adopted_now =
                    self.store
                        .modify(Resource::Sandboxes, namespace, name_of(sandbox), |s| {
                            if controller_uid(s) != Some(pool_uid) {
                                return Err(super::store::ApiError::conflict(
                                    Resource::Sandboxes,
                                    name_of(sandbox),
                                    "already adopted",
                                ));
                            }
                            s["metadata"]["ownerReferences"] = json!([claim_ref]);
                            if let Some(extra) =
                                claim["spec"]["additionalPodMetadata"]["labels"].as_object()
                            {
                                for (k, v) in extra {
                                    s["metadata"]["labels"][k] = v.clone();
                                }
                            }
                            Ok(())
                        });
                if adopted_now.is_ok() {
                    adopted.insert(uid_of(sandbox).to_string());
                    return Ok(Some(sandbox));
                }
                return Err((
                    "AdoptionConflict",
                    "the warm sandbox was taken; the next pass retries from a converged view"
                        .into(),
                ));
            }
            let starting = candidates.iter().any(|s| {
                let key = (namespace.to_string(), name_of(s).to_string());
                lock(&self.shared.runtimes).get(&key).is_none_or(|rt| {
                    rt.fault == SandboxFault::None
                        && rt.exit_code.is_none()
                        && rt.spawn_error.is_none()
                })
            });
            if starting && now.duration_since(first_seen) < CANDIDATE_WAIT {
                return Ok(None);
            }
        }
        // Cold start, named after the claim.
        if let Some(name) = self.create_sandbox(
            claim,
            template,
            Resource::SandboxClaims,
            Some(name_of(claim)),
            "cold",
        ) {
            lock(&self.shared.memory)
                .delays
                .insert((namespace.to_string(), name), self.config.cold_delay);
        }
        Ok(None)
    }

    /// How many sandbox processes run.
    pub(crate) fn process_count(&self) -> usize {
        self.shared.processes.count()
    }
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

fn container_name(pod: &Value) -> (String, String) {
    let container = &pod["spec"]["containers"][0];
    (
        container["name"].as_str().unwrap_or("sandbox").to_string(),
        container["image"]
            .as_str()
            .unwrap_or("uniagent-sandbox")
            .to_string(),
    )
}

/// What the kubelet reports for a pod.
fn pod_status(pod: &Value, rt: &PodRuntime) -> Value {
    let (container, image) = container_name(pod);
    if rt.fault == SandboxFault::Unschedulable {
        return json!({
            "phase": "Pending",
            "qosClass": "Guaranteed",
            "conditions": [pod_condition(
                "PodScheduled",
                false,
                Some("Unschedulable"),
                Some("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."),
            )],
        });
    }
    let ip = rt.ip.map(|ip| ip.to_string()).unwrap_or_default();
    let mut status = json!({
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": rt.started_at,
        "qosClass": "Guaranteed",
    });
    let unready = format!("containers with unready status: [{container}]");
    let (phase, state, ready) = if rt.fault == SandboxFault::ImagePull {
        (
            "Pending",
            json!({"waiting": {"reason": "ErrImagePull", "message": format!("failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": not found")}}),
            false,
        )
    } else if let Some(error) = &rt.spawn_error {
        (
            "Failed",
            json!({"terminated": {"exitCode": 128, "reason": "StartError", "message": error}}),
            false,
        )
    } else if let Some(code) = rt.exit_code {
        (
            if code == 0 { "Succeeded" } else { "Failed" },
            json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }}}),
            false,
        )
    } else if Instant::now() < rt.ready_not_before || rt.pid.is_none() {
        (
            "Pending",
            json!({"waiting": {"reason": "ContainerCreating"}}),
            false,
        )
    } else {
        (
            "Running",
            json!({"running": {"startedAt": rt.started_at}}),
            rt.listening,
        )
    };
    status["phase"] = json!(phase);
    status["containerStatuses"] = json!([{
        "name": container,
        "image": image,
        "imageID": "",
        "ready": ready,
        "started": state.get("running").is_some(),
        "restartCount": 0,
        "state": state,
    }]);
    let reason = (!ready).then_some("ContainersNotReady");
    let message = (!ready).then_some(unready.as_str());
    status["conditions"] = json!([
        pod_condition("PodScheduled", true, None, None),
        pod_condition("Initialized", true, None, None),
        pod_condition("ContainersReady", ready, reason, message),
        pod_condition("Ready", ready, reason, message),
    ]);
    status
}

/// The Sandbox's status from its pod, as the sandbox controller computes it.
fn sandbox_status(sandbox: &Value, pod: Option<&Value>) -> Value {
    let generation = generation(sandbox);
    let mut conditions = Vec::new();
    let mut status = json!({});
    let ready =
        match pod {
            None => condition(
                "Ready",
                false,
                "DependenciesNotReady",
                "Pod does not exist",
                generation,
            ),
            Some(pod) => {
                let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
                let pod_ready = condition_true(&pod["status"]["conditions"], "Ready");
                let ips: Vec<Value> = pod["status"]["podIPs"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|i| i["ip"].as_str())
                            .filter(|s| !s.is_empty())
                            .map(|s| json!(s))
                            .collect()
                    })
                    .unwrap_or_default();
                if !ips.is_empty() {
                    status["podIPs"] = Value::Array(ips.clone());
                }
                if let Some(node) = pod["spec"]["nodeName"].as_str() {
                    if condition_true(&pod["status"]["conditions"], "PodScheduled") {
                        status["nodeName"] = json!(node);
                    }
                }
                match find_condition(&pod["status"]["conditions"], "PodScheduled") {
                    Some(c) => {
                        let scheduled = c["status"] == "True";
                        let reason = c["reason"].as_str().filter(|r| !r.is_empty()).unwrap_or(
                            if scheduled {
                                "PodScheduled"
                            } else {
                                "PodSchedulingUnknown"
                            },
                        );
                        conditions.push(condition(
                            "PodScheduled",
                            scheduled,
                            reason,
                            c["message"].as_str().unwrap_or(""),
                            generation,
                        ));
                    }
                    None => conditions.push(condition(
                        "PodScheduled",
                        false,
                        "PodSchedulingUnknown",
                        "Pod has not reported a PodScheduled condition yet",
                        generation,
                    )),
                }
                match phase {
                    "Succeeded" => {
                        conditions.push(condition(
                            "Finished",
                            true,
                            "PodSucceeded",
                            "Pod completed successfully",
                            generation,
                        ));
                        condition(
                            "Ready",
                            false,
                            "PodSucceeded",
                            "Pod completed successfully",
                            generation,
                        )
                    }
                    "Failed" => {
                        conditions.push(condition(
                            "Finished",
                            true,
                            "PodFailed",
                            "Pod failed",
                            generation,
                        ));
                        condition("Ready", false, "PodFailed", "Pod failed", generation)
                    }
                    "Running" if pod_ready && !ips.is_empty() => condition(
                        "Ready",
                        true,
                        "DependenciesReady",
                        "Pod is Ready",
                        generation,
                    ),
                    "Running" => condition(
                        "Ready",
                        false,
                        "DependenciesNotReady",
                        "Pod is Running but not Ready",
                        generation,
                    ),
                    other => {
                        let waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
                            ["reason"]
                            .as_str();
                        let message = match waiting {
                            Some(reason) => format!(
                                "Pod exists with phase: {other}; container waiting: {reason}"
                            ),
                            None => format!("Pod exists with phase: {other}"),
                        };
                        condition("Ready", false, "DependenciesNotReady", &message, generation)
                    }
                }
            }
        };
    conditions.insert(0, ready);
    status["conditions"] = Value::Array(conditions);
    status["selector"] = json!(format!("{NAME_HASH_LABEL}={}", name_hash(name_of(sandbox))));
    status
}

/// The claim's status from its sandbox, as the claim controller computes it.
fn claim_status(claim: &Value, sandbox: Option<&Value>, never_ready: bool) -> Value {
    let generation = generation(claim);
    let Some(sandbox) = sandbox else {
        return json!({
            "conditions": [condition("Ready", false, "SandboxNotReady", "Sandbox is not ready", generation)],
        });
    };
    let conditions = &sandbox["status"]["conditions"];
    let mut ready = find_condition(conditions, "Ready")
        .cloned()
        .unwrap_or_else(|| {
            condition(
                "Ready",
                false,
                "SandboxNotReady",
                "Sandbox is not ready",
                generation,
            )
        });
    ready["observedGeneration"] = json!(generation);
    if never_ready {
        ready = condition(
            "Ready",
            false,
            "SandboxNotReady",
            "Sandbox is not ready",
            generation,
        );
    }
    let mut list = vec![ready];
    if let Some(finished) = find_condition(conditions, "Finished") {
        list.push(finished.clone());
    }
    let mut sandbox_ref = json!({"name": name_of(sandbox)});
    if let Some(ips) = sandbox["status"]["podIPs"].as_array() {
        sandbox_ref["podIPs"] = Value::Array(ips.clone());
    }
    json!({"conditions": list, "sandbox": sandbox_ref})
}
