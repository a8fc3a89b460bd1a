//! A stand-in for a Kubernetes API server running the agent-sandbox controller and router, for
//! tests and benchmarks of the `k8s` backend (feature `k8s-fake`; design:
//! [decision 0008](../../../../../docs/decisions/0008-k8s-sandboxes.md), "Fake cluster").
//!
//! [`FakeCluster::start`] runs, in this process:
//! - an **API server** (plain HTTP) over one store with one global `resourceVersion`, serving
//!   `SandboxClaim`, `SandboxTemplate`, `SandboxWarmPool` (`extensions.agents.x-k8s.io/v1beta1`),
//!   `Sandbox` (`agents.x-k8s.io/v1beta1`), `Pod` and `ConfigMap` (`v1`), namespaced and as
//!   cluster-wide lists and watches. kube reaches it as a real server:
//!   `kube::Client::try_from(kube::Config::new(fake.api_url().parse()?))`;
//! - a **controller** keeping each warm pool's `spec.replicas` sandboxes, each a real
//!   `uniagent-sandbox` process on its own loopback "pod IP" `127.R.x.y`, port 8000, accepting
//!   tokens signed by the fake's key ([`FakeCluster::mint`]) or by a key of the template's
//!   ConfigMap; binding claims (adopt, else cold start), forwarding conditions, enforcing
//!   `shutdownTime`, collecting garbage;
//! - a **router** (`X-Sandbox-ID`, `X-Sandbox-Namespace`, `X-Sandbox-Port`);
//! - **faults** through [`Faults`] or `POST /_fake/*` on the API server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use uniagent_sandboxes::k8s::fake::{FakeCluster, FakeOptions};
//! let fake = FakeCluster::start(FakeOptions::default()).await?;
//! fake.create_warm_pool("default", "pool", 2).await?;
//! let client = kube::Client::try_from(kube::Config::new(fake.api_url().parse()?))?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! # What the API server does as a real one does
//! create (201; 409 `AlreadyExists`; `generateName`; name validation, 422), get (404
//! `NotFound`), list (`labelSelector` with `=`, `==`, `!=`, `in`, `notin`, `key`, `!key`;
//! `fieldSelector` on `metadata.name`/`metadata.namespace`; `limit` and `continue`; a non-empty
//! `metadata.resourceVersion`), update (PUT, `resourceVersion` required, 409 when stale), merge
//! patch, apply patch, delete (`propagationPolicy` in the query or the `DeleteOptions` body,
//! preconditions; 202 while finalizers or a graceful pod deletion hold the object), the
//! `status` subresource (writes through the main resource keep `status`, and the reverse),
//! `generation` bumped on changes outside `metadata` and `status`, and watches: newline-delimited
//! events strictly after `resourceVersion` (`""` or `0`: the current objects as `ADDED` first),
//! selectors applied to both sides of a change (an object leaving the selection is `DELETED`),
//! `timeoutSeconds`, `BOOKMARK`s every `bookmark_interval` with `allowWatchBookmarks=true`, a
//! version older than the kept history answered with HTTP 200 and an `ERROR` event carrying a
//! 410 `Expired` Status (the only form on which kube's watcher re-lists). Errors are `Status`
//! objects; 429 carries `Retry-After`.
//! The pods' `portforward` subresource is served over WebSocket (`v4.channel.k8s.io`, one port
//! per request) to the pod's address, as `kubectl port-forward` and kube's `Api::portforward`
//! use it.
//!
//! # What is simplified
//! - Apply patches are read as JSON (kube sends JSON) and applied as create-or-replace: the
//!   top-level fields given replace the current ones, others (except `status`) go, labels and
//!   annotations are merged. There is no field ownership, `managedFields` or conflict on apply.
//! - JSON patch and strategic merge patch get 415; `dryRun` gets 400; `deletecollection` 405.
//! - A list with `resourceVersionMatch=Exact` is served only at the current version (else 410);
//!   `continue` tokens do not expire; pages after the first reflect current objects.
//! - No authentication, admission, defaulting, schema validation, discovery, or TLS.
//! - Pods: no scheduling, probes or restarts. By default ([`PodRunner::Processes`]) no images
//!   either: `Unschedulable` and `ErrImagePull` exist only as injected faults, and readiness is
//!   the process accepting TCP on its address (the template's `tcpSocket` probe). With
//!   [`PodRunner::Docker`] a pod is a container of its image (`ErrImagePull` when the image is
//!   missing), ready once its server prints that it listens; only the carrier's copy runs as
//!   an init container, and only `emptyDir` and ConfigMap volumes are mounted. A cold start is Ready no sooner than `cold_delay` after its
//!   pod is made. The key file comes from the ConfigMap the container's
//!   `--auth-public-key-file` resolves to through its volume mounts, else the fake's own.
//! - Warm pools ignore `updateStrategy` (a changed template does not replace warm sandboxes);
//!   `additionalPodMetadata` labels go onto an adopted Sandbox only.
//! - The generated signing key comes from a non-cryptographic generator: test use only.

mod api;
#[cfg(feature = "docker")]
mod containers;
mod controller;
mod faults;
mod portforward;
mod process;
mod router;
mod selector;
mod serve;
mod store;
mod util;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Value};

use crate::signed_token::Minter;

pub use controller::{
    LAUNCH_TYPE_LABEL, NAME_HASH_LABEL, POD_NAME_ANNOTATION, TEMPLATE_REF_ANNOTATION,
};
pub use faults::{Faults, Forbidden, SandboxFault};
pub use process::SANDBOX_PORT;
pub use selector::{FieldSelector, LabelSelector};
pub use store::{
    name_of, namespace_of, rv_of, uid_of, ApiError, Deleted, Propagation, Resource, Store,
    AGENTS_GROUP, AGENT_SANDBOX_VERSION, EXTENSIONS_GROUP, FOREGROUND_FINALIZER,
};

use api::{ApiState, Hooks};
use controller::{ControllerConfig, ControllerHandle};
use faults::FaultState;
use serve::Server;

/// The key id of the fake's own signing key in its key file.
pub const FAKE_KID: &str = "fake";
/// The ConfigMap [`FakeCluster::create_warm_pool`] writes the public keys to.
pub const KEYS_CONFIG_MAP: &str = "uniagent-sandbox-keys";

/// Why the fake could not start or do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FakeError {
    /// Binding, files, processes.
    #[error("k8s fake: {0}")]
    Io(#[from] std::io::Error),
    /// The `uniagent-sandbox` binary is missing.
    #[error("k8s fake: {0}")]
    Binary(String),
    /// The store refused an object.
    #[error("k8s fake: {} ({})", .0.message, .0.code)]
    Api(ApiError),
    /// A wait ran out.
    #[error("k8s fake: timed out waiting for {0}")]
    Timeout(String),
    /// The options ask for something this build lacks.
    #[error("k8s fake: {0}")]
    Unsupported(String),
}

impl From<ApiError> for FakeError {
    fn from(error: ApiError) -> Self {
        FakeError::Api(error)
    }
}

/// Settings of a [`FakeCluster`].
#[derive(Debug, Clone)]
pub struct FakeOptions {
    /// Address of the API server (port 0: any free port).
    pub api_addr: SocketAddr,
    /// Address of the router (port 0: any free port).
    pub router_addr: SocketAddr,
    /// How long a new claim waits before adopting a ready warm sandbox (default 0).
    pub adopt_delay: Duration,
    /// How long a cold-started sandbox takes at least to become Ready (default 300 ms).
    pub cold_delay: Duration,
    /// How often watches with `allowWatchBookmarks=true` get a `BOOKMARK` (default 5 s).
    pub bookmark_interval: Duration,
    /// How many events the store keeps for watches to resume from (default 10,000).
    pub history_limit: usize,
    /// The `uniagent-sandbox` binary (default: next to the current executable or on `PATH`).
    pub server_binary: Option<PathBuf>,
    /// A public key file for sandboxes whose template names no ConfigMap key file (default: a
    /// file with the fake's own generated key, id [`FAKE_KID`]).
    pub key_file: Option<PathBuf>,
    /// The second octet `R` of the sandboxes' addresses `127.R.x.y` (default: picked per fake,
    /// so that fakes in one process, or in processes started together, do not clash).
    pub loopback_octet: Option<u8>,
    /// What runs the pods (default: [`PodRunner::Processes`]).
    pub pods: PodRunner,
}

/// What the fake kubelet runs each pod as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PodRunner {
    /// A `uniagent-sandbox` process on the host, on the pod's loopback address, in a folder of
    /// its own: fast, no images; the pod's image only names its template.
    #[default]
    Processes,
    /// A Docker container of the pod's image (feature `docker`), with the server the init
    /// container installs and the ConfigMap's keys copied in, its limits applied and its ports
    /// published on the pod's loopback address: the pod's own file system and tools, as on a
    /// node. A missing image is the pod's `ErrImagePull`.
    Docker,
}

impl Default for FakeOptions {
    fn default() -> Self {
        FakeOptions {
            api_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            router_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            adopt_delay: Duration::ZERO,
            cold_delay: Duration::from_millis(300),
            bookmark_interval: Duration::from_secs(5),
            history_limit: 10_000,
            server_binary: None,
            key_file: None,
            loopback_octet: None,
            pods: PodRunner::Processes,
        }
    }
}

/// A second octet for this fake: distinct within the process, spread by pid across processes.
fn pick_octet() -> u8 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let spread = std::process::id()
        .wrapping_mul(37)
        .wrapping_add(n.wrapping_mul(11));
    // 2..=254: 127.0.x.y and 127.1.x.y stay free for everything else.
    u8::try_from(2 + spread % 253).unwrap_or(2)
}

/// The docker backend's run id label of the pod containers of the fake with id `fake_id`.
fn container_run_id(fake_id: &str) -> String {
    format!("k8s-fake-{fake_id}")
}

/// A running fake cluster: API server, controller and router. Dropping it stops all three and
/// kills every sandbox process.
#[derive(Debug)]
pub struct FakeCluster {
    store: Arc<Store>,
    faults: Faults,
    api: Arc<Server>,
    router: Arc<Server>,
    controller: Arc<ControllerHandle>,
    _hooks: Arc<Hooks>,
    minter: Minter,
    key_file: PathBuf,
    signing_key_file: PathBuf,
    loopback_octet: u8,
    dir: tempfile::TempDir,
}

impl FakeCluster {
    /// Starts the API server, the router and the controller.
    pub async fn start(options: FakeOptions) -> Result<FakeCluster, FakeError> {
        if options.pods == PodRunner::Docker && !cfg!(feature = "docker") {
            return Err(FakeError::Unsupported(
                "pods in Docker need the `docker` feature of uniagent-sandboxes".into(),
            ));
        }
        let server_binary = crate::host::find_server_binary(options.server_binary.as_deref())
            .map_err(|e| FakeError::Binary(e.to_string()))?;
        let dir = tempfile::Builder::new()
            .prefix("uniagent-k8s-fake-")
            .tempdir()?;
        let mut seed = [0u8; 32];
        for byte in &mut seed {
            *byte = fastrand::u8(..);
        }
        let minter = Minter::from_seed(seed);
        let signing_key_file = dir.path().join("signing.key");
        std::fs::write(&signing_key_file, format!("{}\n", base64_of(&seed)))?;
        let own_keys = dir.path().join("keys");
        std::fs::write(&own_keys, key_file_text(&minter))?;
        let key_file = options.key_file.clone().unwrap_or(own_keys);

        let store = Arc::new(Store::new(options.history_limit));
        let fault_state = Arc::new(FaultState::new());
        let hooks = Arc::new(Hooks::default());
        let loopback_octet = options.loopback_octet.unwrap_or_else(pick_octet);
        let controller = Arc::new(ControllerHandle::new(
            ControllerConfig {
                adopt_delay: options.adopt_delay,
                cold_delay: options.cold_delay,
                server_binary,
                default_key_file: key_file.clone(),
                work_dir: dir.path().to_path_buf(),
                loopback_octet,
                pods: options.pods,
            },
            store.clone(),
            fault_state.clone(),
        ));
        let api_state = ApiState {
            store: store.clone(),
            faults: fault_state.clone(),
            bookmark_interval: options.bookmark_interval,
            hooks: hooks.clone(),
        };
        let api = Arc::new(Server::start(options.api_addr, api::router(api_state)).await?);
        let router =
            Arc::new(Server::start(options.router_addr, router::router(store.clone())).await?);
        let _ = hooks.api.set(Arc::downgrade(&api));
        let _ = hooks.controller.set(Arc::downgrade(&controller));
        controller.start();
        let faults = Faults {
            state: fault_state,
            store: store.clone(),
            hooks: hooks.clone(),
        };
        Ok(FakeCluster {
            store,
            faults,
            api,
            router,
            controller,
            _hooks: hooks,
            minter,
            key_file,
            signing_key_file,
            loopback_octet,
            dir,
        })
    }

    /// The API server's URL, `http://127.0.0.1:PORT`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.api.addr())
    }

    /// The API server's address.
    pub fn api_addr(&self) -> SocketAddr {
        self.api.addr()
    }

    /// The router's URL.
    pub fn router_url(&self) -> String {
        format!("http://{}", self.router.addr())
    }

    /// The fault handle (cheap to clone).
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The store, for assertions and for setting objects up without the API.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The public key file sandboxes accept tokens from (unless their template names another).
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }

    /// A file holding the base64 seed of the fake's signing key (`signing_key_file` of the
    /// `k8s` backend); its key id is [`FAKE_KID`].
    pub fn signing_key_file(&self) -> &Path {
        &self.signing_key_file
    }

    /// The fake's signing key.
    pub fn minter(&self) -> &Minter {
        &self.minter
    }

    /// A token for sandbox `name`, valid for an hour.
    pub fn mint(&self, name: &str) -> String {
        let exp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            + 3600;
        self.minter.mint(name, exp, FAKE_KID)
    }

    /// The fake's folder (key files, one log per pod: `pod-NAMESPACE-NAME.log`).
    pub fn work_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The second octet of the sandboxes' loopback addresses.
    pub fn loopback_octet(&self) -> u8 {
        self.loopback_octet
    }

    /// The run id (label `dev.uniagent.run-id`) every pod container of this fake carries
    /// ([`PodRunner::Docker`]): `uniagent cleanup --run-id` removes them; tests list them with
    /// `uniagent_sandboxes::docker::list_managed`.
    pub fn container_run_id(&self) -> String {
        self.controller.container_run_id()
    }

    /// How many pod containers this fake started so far ([`PodRunner::Docker`]; 0 otherwise).
    pub fn pod_containers_started(&self) -> u64 {
        self.controller.containers_started()
    }

    /// How many sandbox processes (or pod containers) are running.
    pub fn running_sandboxes(&self) -> usize {
        self.controller.process_count()
    }

    /// Creates (or leaves) ConfigMap [`KEYS_CONFIG_MAP`] with the fake's public key, a
    /// `SandboxTemplate` and a `SandboxWarmPool` of `replicas`, both named `name`, in
    /// `namespace`. The template's container reads its key file from that ConfigMap, as
    /// `deploy/k8s/agent-sandbox/template.example.yaml` does.
    pub async fn create_warm_pool(
        &self,
        namespace: &str,
        name: &str,
        replicas: u32,
    ) -> Result<(), FakeError> {
        if self
            .store
            .get(Resource::ConfigMaps, namespace, KEYS_CONFIG_MAP)
            .is_none()
        {
            self.store.create(
                Resource::ConfigMaps,
                namespace,
                json!({"metadata": {"name": KEYS_CONFIG_MAP}, "data": {"keys": key_file_text(&self.minter)}}),
            )?;
        }
        self.store
            .create(Resource::SandboxTemplates, namespace, template_object(name))?;
        self.store.create(
            Resource::SandboxWarmPools,
            namespace,
            json!({
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "sandboxTemplateRef": {"name": name},
                    "updateStrategy": {"type": "Recreate"},
                },
            }),
        )?;
        Ok(())
    }

    /// Waits until pool `namespace/name` reports `readyReplicas >= ready`.
    pub async fn wait_pool_ready(
        &self,
        namespace: &str,
        name: &str,
        ready: u64,
        timeout: Duration,
    ) -> Result<(), FakeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let count = self
                .store
                .get(Resource::SandboxWarmPools, namespace, name)
                .and_then(|p| p["status"]["readyReplicas"].as_u64())
                .unwrap_or(0);
            if count >= ready {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(FakeError::Timeout(format!(
                    "{ready} ready sandboxes in pool {namespace}/{name} (have {count})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the API server; when it returns, every connection is closed. The store stays.
    pub async fn stop_api(&self) {
        self.api.stop().await;
    }

    /// Serves the API again on the same address with the same store.
    pub async fn restart_api(&self) -> Result<(), FakeError> {
        Ok(self.api.restart().await?)
    }

    /// Stops the controller as a crash would: sandboxes keep running, nothing is reconciled
    /// (no adoption, no expiry, foreground deletions do not finish).
    pub fn stop_controller(&self) {
        self.controller.stop();
    }

    /// Starts the controller again.
    pub fn start_controller(&self) {
        self.controller.start();
    }

    /// Stops everything and kills every sandbox process.
    pub async fn shutdown(self) {
        self.controller.shutdown();
        self.api.stop().await;
        self.router.stop().await;
        // Let the waiter tasks reap the killed processes.
        for _ in 0..100 {
            if self.controller.process_count() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.controller.shutdown();
        self.api.abort();
        self.router.abort();
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A key file with the fake's public key.
fn key_file_text(minter: &Minter) -> String {
    format!(
        "# the k8s fake's signing key\n{FAKE_KID} {}\n",
        minter.public_key_base64()
    )
}

/// A template as the backend renders one (trimmed): the container runs the server with its
/// key file from ConfigMap [`KEYS_CONFIG_MAP`].
pub fn template_object(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "uniagent"}},
        "spec": {
            "envVarsInjectionPolicy": "Disallowed",
            "networkPolicyManagement": "Managed",
            "podTemplate": {
                "metadata": {"labels": {"app.kubernetes.io/name": "uniagent-sandbox"}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "containers": [{
                        "name": "sandbox",
                        "image": "python:3.12-slim",
                        "command": ["/uniagent/uniagent-sandbox"],
                        "args": ["--host=0.0.0.0", "--port=8000", "--auth-public-key-file=/etc/uniagent/keys/keys"],
                        "ports": [{"name": "swerex", "containerPort": 8000, "protocol": "TCP"}],
                        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1},
                        "volumeMounts": [{"name": "keys", "mountPath": "/etc/uniagent/keys", "readOnly": true}],
                    }],
                    "volumes": [{"name": "keys", "configMap": {"name": KEYS_CONFIG_MAP}}],
                },
            },
        },
    })
}

impl Faults {
    /// Stops the API server; when it returns, every connection is closed. The store stays.
    pub async fn stop_api(&self) {
        if let Some(api) = self.hooks.api.get().and_then(Weak::upgrade) {
            api.stop().await;
        }
    }

    /// Serves the API again on the same address with the same store.
    pub async fn restart_api(&self) -> Result<(), FakeError> {
        match self.hooks.api.get().and_then(Weak::upgrade) {
            Some(api) => Ok(api.restart().await?),
            None => Err(FakeError::Io(std::io::Error::other("the fake is gone"))),
        }
    }

    /// Whether the API server is serving.
    pub fn api_running(&self) -> bool {
        self.hooks
            .api
            .get()
            .and_then(Weak::upgrade)
            .is_some_and(|api| api.running())
    }

    /// Stops the controller as a crash would (see [`FakeCluster::stop_controller`]).
    pub fn stop_controller(&self) {
        if let Some(c) = self.hooks.controller.get().and_then(Weak::upgrade) {
            c.stop();
        }
    }

    /// Starts the controller again.
    pub fn start_controller(&self) {
        if let Some(c) = self.hooks.controller.get().and_then(Weak::upgrade) {
            c.start();
        }
    }

    /// Whether the controller runs.
    pub fn controller_running(&self) -> bool {
        self.hooks
            .controller
            .get()
            .and_then(Weak::upgrade)
            .is_some_and(|c| c.running())
    }
}
