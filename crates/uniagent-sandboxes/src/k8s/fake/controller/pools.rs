//! The warm pool controller: `spec.replicas` sandboxes per pool.

use super::*;

impl ControllerHandle {
    /// Warm pools: keep `spec.replicas` unclaimed sandboxes of the pool's template.
    pub(super) fn sync_pools(&self, view: &View) {
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
    pub(super) fn create_sandbox(
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
}
