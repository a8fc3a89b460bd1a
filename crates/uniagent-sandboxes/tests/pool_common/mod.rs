//! Shared helpers of the pool tests: real `uniagent-pool` processes on 127.0.0.1 (one per
//! simulated node) over the local Docker Engine. Each pool gets a unique name; dropping a
//! [`PoolProcess`] kills it and removes every container labelled with its name, so a failing
//! test leaks nothing either.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../deadline_common/mod.rs"]
pub mod deadline;

use bollard::query_parameters::ListContainersOptions;
use uniagent_core::testing::spawn_with_first_line;
use uniagent_sandboxes::docker::{daemon_reachable, engine};
use uniagent_sandboxes::leases::LABEL_POOL;
use uniagent_sandboxes::FaasConfig;

/// The image the tests use: `$UNIAGENT_DOCKER_IMAGE`, else the base image's `latest` tag.
pub fn image() -> String {
    std::env::var("UNIAGENT_DOCKER_IMAGE").unwrap_or_else(|_| "uniagent-sandbox-base:latest".into())
}

/// `true` (after printing why not) when Docker and the image are there.
pub async fn docker_or_skip(test: &str) -> bool {
    if let Err(e) = daemon_reachable().await {
        eprintln!("SKIPPED {test}: no Docker daemon is reachable ({e})");
        return false;
    }
    let docker = engine().await.unwrap();
    let image = image();
    assert!(
        docker.inspect_image(&image).await.is_ok(),
        "the sandbox image `{image}` is missing: run scripts/build-sandbox-image.sh"
    );
    true
}

/// Settings of one test pool.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    pub capacity: usize,
    pub warm: usize,
    pub lease_ttl: f64,
    pub max_ttl: f64,
    /// The control-plane API key, passed to the pool in `UNIAGENT_TEST_POOL_KEY`.
    pub api_key: Option<String>,
    /// Seconds a SIGTERMed pool waits for its live leases.
    pub drain_grace: f64,
    /// The pool's `DOCKER_HOST` (default: the one the tests see).
    pub docker_host: Option<String>,
}

impl Default for PoolSpec {
    fn default() -> Self {
        Self {
            capacity: 8,
            warm: 0,
            lease_ttl: 30.0,
            max_ttl: 60.0,
            api_key: None,
            drain_grace: 30.0,
            docker_host: None,
        }
    }
}

/// A running `uniagent-pool` process.
pub struct PoolProcess {
    pub name: String,
    pub url: String,
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl PoolProcess {
    /// Starts a pool named `name` with `spec` on `port` (0: a free one).
    pub fn start(name: &str, spec: &PoolSpec, port: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "name: {name}\ncapacity: {}\nlease_ttl: {}\nmax_ttl: {}\ndrain_grace: {}\nreap_interval: 0.2\nimages:\n  - warm: {}\n    docker:\n      image: {}\n      memory_bytes: {}\n      cpus: 0.5\n      pids_limit: 128\n      lifetime: 600\n      startup_timeout: 120\n      server_binary: {}\n",
            spec.capacity,
            spec.lease_ttl,
            spec.max_ttl,
            spec.drain_grace,
            spec.warm,
            image(),
            128u64 << 20,
            env!("CARGO_BIN_EXE_uniagent-sandbox"),
        );
        let config = match &spec.api_key {
            Some(_) => format!("api_key_env: UNIAGENT_TEST_POOL_KEY\n{config}"),
            None => config,
        };
        let path = dir.path().join("pool.yaml");
        std::fs::write(&path, config).unwrap();
        std::fs::write(
            dir.path().join("key"),
            spec.api_key.clone().unwrap_or_default(),
        )
        .unwrap();
        if let Some(host) = &spec.docker_host {
            std::fs::write(dir.path().join("docker_host"), host).unwrap();
        }
        Self::spawn(name.to_owned(), dir, port)
    }

    fn spawn(name: String, dir: tempfile::TempDir, port: u16) -> Self {
        let (child, url, port) = launch(&dir, port);
        Self {
            name,
            url,
            port,
            child: Some(child),
            dir,
        }
    }

    /// SIGKILLs the pool (its containers stay, as after a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends the pool SIGTERM (it starts draining).
    pub fn terminate(&self) {
        let child = self.child.as_ref().expect("the pool is running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }

    /// The pool's exit status once it has exited, polling for at most `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs the pool and starts it again with the same name, configuration and port.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The old listener's port may take a moment to be free again.
            if std::net::TcpListener::bind(("127.0.0.1", self.port)).is_ok()
                || Instant::now() > deadline
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let (child, url, _) = launch(&self.dir, self.port);
        assert_eq!(
            url, self.url,
            "the restarted pool listens where the first one did"
        );
        self.child = Some(child);
    }

    /// A faas configuration leasing from this pool alone.
    pub fn faas(&self) -> FaasConfig {
        faas_config(&[self])
    }
}

/// Starts `uniagent-pool` with the configuration in `dir` and reads its first line.
fn launch(dir: &tempfile::TempDir, port: u16) -> (Child, String, u16) {
    let key = std::fs::read_to_string(dir.path().join("key")).unwrap_or_default();
    let mut command = Command::new(env!("CARGO_BIN_EXE_uniagent-pool"));
    if let Ok(host) = std::fs::read_to_string(dir.path().join("docker_host")) {
        command.env("DOCKER_HOST", host);
    }
    let (child, line) = spawn_with_first_line(
        command
            .env("UNIAGENT_TEST_POOL_KEY", key)
            .arg("--config")
            .arg(dir.path().join("pool.yaml"))
            .args(["--port", &port.to_string()])
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit()),
    );
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from uniagent-pool: {line:?}"))
        .to_owned();
    let port = url.rsplit(':').next().unwrap().parse().unwrap();
    (child, url, port)
}

/// A faas configuration over `pools`, with a short lease TTL.
pub fn faas_config(pools: &[&PoolProcess]) -> FaasConfig {
    FaasConfig {
        control_url: pools[0].url.clone(),
        endpoints: pools[1..].iter().map(|p| p.url.clone()).collect(),
        image: image(),
        lease_ttl: Duration::from_secs(3),
        timeout: Duration::from_secs(60),
        ..FaasConfig::default()
    }
}

impl Drop for PoolProcess {
    fn drop(&mut self) {
        self.kill();
        let name = self.name.clone();
        // A fresh thread and runtime: drops may happen while a test's runtime unwinds.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(remove_pool_containers(&name));
        })
        .join()
        .unwrap();
    }
}

/// Ids of the containers labelled with pool `name` (any state).
pub async fn pool_containers(name: &str) -> Vec<String> {
    let docker = engine().await.unwrap();
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("{LABEL_POOL}={name}")],
        )])),
        ..Default::default()
    };
    docker
        .list_containers(Some(options))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// Force-removes the containers of pool `name`, each Docker call with a short deadline (a
/// daemon that stopped answering must not hang a failing test's cleanup).
async fn remove_pool_containers(name: &str) {
    let (_, left) = deadline::remove_labelled(&[format!("{LABEL_POOL}={name}")]).await;
    if left > 0 {
        eprintln!("pool {name}: {left} container(s) could not be removed");
    }
}

/// Polls until pool `name` has exactly `count` containers or `within` passes; returns how
/// long it took (or panics naming what is left).
pub async fn wait_for_containers(name: &str, count: usize, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let now = pool_containers(name).await.len();
        if now == count {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "pool {name} still has {now} containers (want {count}) after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A pool name unique to this test and process; inside [`deadline::deadline`] its containers
/// are removed when the test fails.
pub fn unique(test: &str) -> String {
    let name = format!("t-{test}-{}-{:x}", std::process::id(), fastrand::u32(..));
    deadline::track_pool(&name);
    name
}

/// A GET of `url` answered with JSON.
pub async fn get_json(url: &str) -> serde_json::Value {
    let client = reqwest::Client::new();
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// A POST of `body` to `url`, answered with JSON.
pub async fn post_json(url: &str, body: &serde_json::Value) -> serde_json::Value {
    let response = reqwest::Client::new().post(url).json(body).send().await;
    response.unwrap().json().await.unwrap()
}
