//! The Sandbox controller: a pod per sandbox, and the sandbox status from it.

use super::*;

/// The Sandbox's status from its pod, as the sandbox controller computes it.
pub(super) fn sandbox_status(sandbox: &Value, pod: Option<&Value>) -> Value {
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

impl ControllerHandle {
    /// Sandboxes: each gets its pod, and a status from it.
    pub(super) fn sync_sandboxes(&self, view: &View) {
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

    pub(super) fn create_pod(&self, sandbox: &Value) {
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
}
