//! The kubelet's Docker side ([`PodRunner::Docker`]): a pod's container started, watched until
//! its server listens and until it exits, and removed when the pod goes.

use super::*;

#[cfg(feature = "docker")]
use super::super::containers::{plan::plan, StartFailure};

impl ControllerHandle {
    /// Starts pod `key`'s container on `ip` in the background; `Err` (the pod's `StartError`)
    /// when the pod spec is one the fake cannot run.
    #[cfg(feature = "docker")]
    pub(super) fn spawn_container(
        &self,
        key: (String, String),
        ip: Ipv4Addr,
        pod: &Value,
    ) -> Result<(), String> {
        let store = self.store.clone();
        let config_maps =
            move |namespace: &str, name: &str| store.get(Resource::ConfigMaps, namespace, name);
        let plan = plan(pod, ip, &config_maps)?;
        if let Some(rt) = lock(&self.shared.runtimes).get_mut(&key) {
            rt.creating = true;
        }
        let shared = self.shared.clone();
        let binary = self.config.server_binary.clone();
        tokio::spawn(async move {
            let started = shared
                .containers
                .start((&key.0, &key.1), &plan, ip, &binary)
                .await;
            // Decided under the lock, done after it.
            let made = {
                let mut runtimes = lock(&shared.runtimes);
                match (started, runtimes.get_mut(&key)) {
                    (Ok(id), Some(rt)) if !rt.stopping => {
                        rt.creating = false;
                        rt.container = Some(id.clone());
                        Some(Ok(id))
                    }
                    // The pod was deleted while its container was being made.
                    (Ok(id), _) => Some(Err(id)),
                    (Err(failure), Some(rt)) => {
                        rt.creating = false;
                        match failure {
                            StartFailure::ImageMissing(_) => rt.fault = SandboxFault::ImagePull,
                            StartFailure::Other(e) => rt.spawn_error = Some(e),
                        }
                        None
                    }
                    (Err(_), None) => None,
                }
            };
            let id = match made {
                Some(Ok(id)) => id,
                Some(Err(unwanted)) => {
                    shared.containers.remove(&unwanted).await;
                    if let Some(rt) = lock(&shared.runtimes).get_mut(&key) {
                        rt.creating = false;
                        rt.exit_code = Some(137);
                    }
                    shared.wake.notify_one();
                    return;
                }
                None => {
                    shared.wake.notify_one();
                    return;
                }
            };
            shared.wake.notify_one();
            if shared.containers.wait_listening(&id).await.is_ok() {
                if let Some(rt) = lock(&shared.runtimes).get_mut(&key) {
                    rt.listening = true;
                }
                shared.wake.notify_one();
            }
            let code = shared.containers.wait_exit(&id).await;
            if let Some(rt) = lock(&shared.runtimes).get_mut(&key) {
                if rt.container.as_deref() == Some(id.as_str()) {
                    rt.exit_code.get_or_insert(code);
                }
            }
            shared.wake.notify_one();
        });
        Ok(())
    }

    #[cfg(not(feature = "docker"))]
    pub(super) fn spawn_container(
        &self,
        _key: (String, String),
        _ip: Ipv4Addr,
        _pod: &Value,
    ) -> Result<(), String> {
        Err("this build of the fake has no Docker runtime (feature `docker`)".into())
    }

    /// Removes container `id` in the background; then pod `key` (when given) has exited.
    #[cfg(feature = "docker")]
    pub(super) fn remove_container(&self, key: Option<(String, String)>, id: String) {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            shared.containers.remove(&id).await;
            if let Some(key) = key {
                if let Some(rt) = lock(&shared.runtimes).get_mut(&key) {
                    rt.exit_code.get_or_insert(137);
                }
            }
            shared.wake.notify_one();
        });
    }

    #[cfg(not(feature = "docker"))]
    pub(super) fn remove_container(&self, _key: Option<(String, String)>, _id: String) {}
}
