//! The kubelet: each pod a `uniagent-sandbox` process on its own loopback address (or a Docker
//! container of the pod's image, [`PodRunner::Docker`]), and the pods' status.

use super::*;

/// What the kubelet knows of one pod.
#[derive(Debug)]
pub(super) struct PodRuntime {
    pub(super) ip: Option<Ipv4Addr>,
    pub(super) fault: SandboxFault,
    pub(super) pid: Option<i32>,
    /// The pod's container ([`PodRunner::Docker`]), once created.
    pub(super) container: Option<String>,
    /// A container is being created (deleting the pod waits for it, then removes it).
    pub(super) creating: bool,
    /// The pod's process or container is being stopped.
    pub(super) stopping: bool,
    pub(super) ready_not_before: Instant,
    pub(super) listening: bool,
    pub(super) exit_code: Option<i32>,
    pub(super) spawn_error: Option<String>,
    pub(super) started_at: String,
}

pub(super) fn pod_condition(
    kind: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<&str>,
) -> Value {
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

pub(super) fn container_name(pod: &Value) -> (String, String) {
    let container = &pod["spec"]["containers"][0];
    (
        container["name"].as_str().unwrap_or("sandbox").to_string(),
        container["image"]
            .as_str()
            .unwrap_or("uniagent-sandbox")
            .to_string(),
    )
}

impl PodRuntime {
    /// Whether the pod's process or container was started.
    fn started(&self) -> bool {
        self.pid.is_some() || self.container.is_some()
    }
}

/// What the kubelet does with a pod being deleted.
enum Stop {
    /// Nothing runs: the pod can go.
    Done,
    /// Kill this process (again, until it is reaped).
    Kill(i32),
    /// Remove this container.
    Remove(String),
    /// A removal or a creation is under way.
    Wait,
}

/// What the kubelet reports for a pod.
pub(super) fn pod_status(pod: &Value, rt: &PodRuntime) -> Value {
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
    } else if Instant::now() < rt.ready_not_before || !rt.started() {
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

impl ControllerHandle {
    pub(super) fn allocate_ip(&self) -> Ipv4Addr {
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
    pub(super) fn key_file_for(&self, pod: &Value) -> PathBuf {
        self.resolve_key_file(pod)
            .unwrap_or_else(|| self.config.default_key_file.clone())
    }

    pub(super) fn resolve_key_file(&self, pod: &Value) -> Option<PathBuf> {
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

    pub(super) fn spawn_process(
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
    pub(super) fn run_pods(&self, view: &View) {
        let pods = view.of(Resource::Pods);
        let live: HashSet<(String, String)> = pods
            .iter()
            .map(|p| (namespace_of(p).to_string(), name_of(p).to_string()))
            .collect();
        // Processes and containers whose pod vanished.
        let orphaned: Vec<PodRuntime> = {
            let mut runtimes = lock(&self.shared.runtimes);
            let gone: Vec<(String, String)> = runtimes
                .keys()
                .filter(|k| !live.contains(*k))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|k| runtimes.remove(&k))
                .filter(|rt| rt.exit_code.is_none())
                .collect()
        };
        for rt in orphaned {
            if let Some(pid) = rt.pid {
                self.shared.processes.kill(pid);
            }
            // A container still being created is removed by its creator, which finds its pod
            // gone.
            if let Some(id) = rt.container {
                self.remove_container(None, id);
            }
        }
        for pod in pods {
            let key = (namespace_of(pod).to_string(), name_of(pod).to_string());
            if deleting(pod) {
                let stop = match lock(&self.shared.runtimes).get_mut(&key) {
                    None => Stop::Done,
                    Some(rt) if rt.exit_code.is_some() => Stop::Done,
                    Some(rt) if rt.creating => {
                        rt.stopping = true;
                        Stop::Wait
                    }
                    Some(rt) => match (rt.pid, rt.container.clone()) {
                        (Some(pid), _) => Stop::Kill(pid),
                        (None, Some(_)) if rt.stopping => Stop::Wait,
                        (None, Some(id)) => {
                            rt.stopping = true;
                            Stop::Remove(id)
                        }
                        (None, None) => Stop::Done,
                    },
                };
                match stop {
                    Stop::Done => {
                        lock(&self.shared.runtimes).remove(&key);
                        self.store.remove_now(Resource::Pods, &key.0, &key.1);
                    }
                    Stop::Kill(pid) => self.shared.processes.kill(pid),
                    Stop::Remove(id) => self.remove_container(Some(key), id),
                    Stop::Wait => {}
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
                    container: None,
                    creating: false,
                    stopping: false,
                    ready_not_before: Instant::now() + delay,
                    listening: false,
                    exit_code: None,
                    spawn_error: None,
                    started_at: now_rfc3339(),
                };
                lock(&self.shared.runtimes).insert(key.clone(), rt);
                if let (SandboxFault::None, Some(ip)) = (fault, ip) {
                    let started = match self.config.pods {
                        PodRunner::Processes => self.spawn_process(key.clone(), ip, pod).map(drop),
                        PodRunner::Docker => self.spawn_container(key.clone(), ip, pod),
                    };
                    if let Err(e) = started {
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
}
