//! The sandbox pool service (feature `pool`): one per node, it starts sandboxes through the
//! [`docker`](crate::docker) backend and leases them to clients over HTTP (the API in
//! `docs/pool-openapi.yaml`, the wire types in [`leases`](crate::leases)).
//!
//! - **Leases.** `POST /v1/leases` gives a sandbox of a configured image for a time to live;
//!   the client renews it (`POST /v1/leases/{id}/renew`) and releases it
//!   (`DELETE /v1/leases/{id}`). A lease not renewed in time is reaped: its container is
//!   removed.
//! - **Data plane.** The sandbox's SWE-ReX server answers under the pool's own address at
//!   `/v1/leases/{id}/sandbox/...` (a byte-for-byte proxy), so sandboxes keep Docker's `none`
//!   network and only the pool's port has to be reachable from other machines.
//! - **Warm pools and capacity.** Each image keeps `warm` sandboxes started in advance (probed
//!   before they are leased, replaced when dead or older than half their lifetime); leased,
//!   warm and starting sandboxes together never exceed `capacity`; a full pool answers 503
//!   `capacity_exhausted` (retryable) at once instead of queueing.
//! - **Daemon health.** The Docker daemon is probed every few seconds; while it does not
//!   answer, `/healthz` answers 503 and lease requests (also those waiting on a start) 503
//!   `daemon_unavailable` (retryable) instead of hanging on Docker calls.
//! - **Restarts.** Every container carries the pool's name and its lease id as labels; a pool
//!   that starts finds its containers, reaches them again and gives each recovered lease
//!   `max_ttl` to be renewed, so the leases of live clients survive and the others are reaped.
//!
//! ```no_run
//! # async fn demo() -> uniagent_core::Result<()> {
//! use uniagent_core::config::{parse, ConfigFormat};
//! use uniagent_sandboxes::pool::{Pool, PoolConfig};
//!
//! let config: PoolConfig = parse(
//!     "name: node-a\ncapacity: 8\nimages:\n  - warm: 2\n    docker: {image: uniagent-sandbox-base:latest}\n",
//!     ConfigFormat::Yaml,
//! )?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let pool = Pool::start(config).await?;
//! pool.serve(listener, std::future::pending()).await?; // removes every sandbox when it ends
//! # Ok(()) }
//! ```

mod background;
mod config;
mod health;
mod limits;
mod proxy;
mod recover;
mod routes;
mod sandbox;
mod table;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bollard::Docker;
use tokio::sync::Notify;
use uniagent_core::{Error, Result};

pub use config::{ImagePool, PoolConfig};

use crate::leases::{AcquireRequest, Capacity, ErrorKind, Lease, LeaseList};
use limits::lease_ttl;
pub use limits::{admit, Admission};
use sandbox::Sandbox;
use table::{Held, Reservation, Table};

/// A failed pool operation: the typed kind the API answers with, and the detail.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolError {
    /// The kind (and with it the HTTP status).
    pub kind: ErrorKind,
    /// What went wrong.
    pub message: String,
}

impl PoolError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// A running pool: its table of sandboxes and the tasks that reap and refill it.
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: PoolConfig,
    docker: Docker,
    table: Mutex<Table>,
    /// Wakes the warm-pool refiller.
    refill: Notify,
    api_key: Option<String>,
    /// Removals started by [`Pool::stop_later`] and not finished: shutdown waits for them, so
    /// a sandbox released just before the pool stops is not left behind.
    removing: AtomicUsize,
    removed: Notify,
    /// Whether the Docker daemon answers (probed in the background).
    health: health::Health,
}

impl Pool {
    /// Validates `config`, connects to Docker, recovers the sandboxes a previous run of this
    /// pool left (by label) and starts the reaper and the warm-pool refiller.
    pub async fn start(config: PoolConfig) -> Result<Self> {
        config.validate()?;
        let api_key = match &config.api_key_env {
            Some(var) => std::env::var(var).ok(),
            None => None,
        };
        let docker = crate::docker::engine().await?;
        let pool = Self {
            inner: Arc::new(Inner {
                table: Mutex::new(Table::new(config.capacity)),
                config,
                docker,
                refill: Notify::new(),
                api_key,
                removing: AtomicUsize::new(0),
                removed: Notify::new(),
                health: health::Health::new(),
            }),
        };
        recover::recover(&pool).await?;
        background::spawn(&pool);
        Ok(pool)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave the table half-updated in a way that
        // matters more than losing the pool: keep serving.
        self.inner
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Grants a lease: a warm sandbox when one fits, else a fresh one in a free slot.
    pub async fn acquire(&self, request: AcquireRequest) -> std::result::Result<Lease, PoolError> {
        let config = &self.inner.config;
        let Admission {
            template,
            ttl,
            limits,
            warm_ok,
        } = admit(config, &request)?;
        if let Some(why) = self.inner.health.unhealthy() {
            return Err(daemon_unavailable(&why));
        }
        let (sandbox, warm) = loop {
            // Bound first: the table's lock must not be held across the awaits below.
            let reservation = self.table().reserve(&request.image, warm_ok);
            match reservation {
                // A warm sandbox that died while it waited (killed, out of memory) is
                // replaced, not handed out; the probe also leaves a fresh connection open.
                Reservation::Warm(sandbox) => {
                    if sandbox.proxy.warm_up(&sandbox.url, &sandbox.token).await {
                        break (sandbox, true);
                    }
                    tracing::warn!(lease = %sandbox.id, "a warm sandbox was dead; replacing it");
                    self.stop_later(sandbox);
                    self.inner.refill.notify_one();
                }
                other => {
                    break self
                        .cold_or_refuse(other, template, limits.as_ref())
                        .await?
                }
            }
        };
        self.inner.refill.notify_one();
        let now = Instant::now();
        let held = Held {
            image: request.image,
            client: request.client,
            ttl,
            expires: now + ttl,
            recovered: false,
            warm,
            sandbox,
        };
        let lease = self.lease_of(&held, now);
        let mut table = self.table();
        if table.closing {
            drop(table);
            self.stop_later(held.sandbox);
            return Err(PoolError::new(
                ErrorKind::ShuttingDown,
                "the pool is shutting down",
            ));
        }
        table.leases.insert(lease.id.clone(), held);
        Ok(lease)
    }

    /// What a reservation other than a warm sandbox gives: a cold start or a typed refusal.
    async fn cold_or_refuse(
        &self,
        reservation: Reservation,
        template: &ImagePool,
        limits: Option<&crate::leases::Limits>,
    ) -> std::result::Result<(Sandbox, bool), PoolError> {
        let config = &self.inner.config;
        match reservation {
            Reservation::Warm(sandbox) => Ok((sandbox, true)),
            Reservation::Closing => Err(PoolError::new(
                ErrorKind::ShuttingDown,
                "the pool is shutting down",
            )),
            Reservation::Full => Err(PoolError::new(
                ErrorKind::CapacityExhausted,
                format!(
                    "all {} slots of pool `{}` are taken",
                    config.capacity, config.name
                ),
            )),
            Reservation::Cold { evicted } => {
                let slot = StartSlot::new(self, None);
                if let Some(evicted) = evicted {
                    self.stop_later(evicted);
                }
                // A daemon that stops answering must not hold the request for the length of
                // every Docker call's deadline (and of the start limiter's queue behind them):
                // the start is abandoned (its container removed) once the probe gives up.
                let run_id = config.run_id();
                let start = Sandbox::start(&config.name, &run_id, &template.docker, limits);
                let started = tokio::select! {
                    started = start => started,
                    why = self.inner.health.became_unhealthy() => {
                        drop(slot);
                        return Err(daemon_unavailable(&why));
                    }
                };
                drop(slot);
                let sandbox = started.map_err(|e| {
                    PoolError::new(ErrorKind::StartFailed, format!("starting a sandbox: {e}"))
                })?;
                Ok((sandbox, false))
            }
        }
    }

    fn lease_of(&self, held: &Held, now: Instant) -> Lease {
        Lease {
            id: held.sandbox.id.clone(),
            image: held.image.clone(),
            node: self.inner.config.name.clone(),
            sandbox_path: format!("/v1/leases/{}/sandbox", held.sandbox.id),
            token: held.sandbox.token.clone(),
            ttl_secs: held.ttl.as_secs_f64(),
            expires_at: held.expires_at(now),
            warm: held.warm,
        }
    }

    /// Extends lease `id` (whose token is `token`) by `ttl_secs` (default: its TTL) from now.
    pub fn renew(
        &self,
        id: &str,
        token: &str,
        ttl_secs: Option<f64>,
    ) -> std::result::Result<Lease, PoolError> {
        let ttl = match ttl_secs {
            Some(_) => Some(lease_ttl(&self.inner.config, ttl_secs)?),
            None => None,
        };
        let now = Instant::now();
        let mut table = self.table();
        let held = table
            .leases
            .get_mut(id)
            .filter(|held| tokens_match(&held.sandbox.token, token))
            .ok_or_else(|| lease_not_found(id))?;
        if let Some(ttl) = ttl {
            held.ttl = ttl;
        }
        held.expires = now + held.ttl;
        let held = &*held;
        Ok(self.lease_of(held, now))
    }

    /// Ends lease `id` (whose token is `token`) and removes its sandbox in the background.
    pub fn release(&self, id: &str, token: &str) -> std::result::Result<(), PoolError> {
        let held = {
            let mut table = self.table();
            let ok = table
                .leases
                .get(id)
                .is_some_and(|held| tokens_match(&held.sandbox.token, token));
            if !ok {
                return Err(lease_not_found(id));
            }
            table.leases.remove(id)
        };
        if let Some(held) = held {
            self.stop_later(held.sandbox);
        }
        self.inner.refill.notify_one();
        Ok(())
    }

    /// Every live lease.
    pub fn list(&self) -> LeaseList {
        let now = Instant::now();
        let table = self.table();
        let mut leases: Vec<_> = table.leases.values().map(|h| h.info(now)).collect();
        leases.sort_by(|a, b| a.id.cmp(&b.id));
        LeaseList { leases }
    }

    /// How full the node is.
    pub fn capacity(&self) -> Capacity {
        let config = &self.inner.config;
        let targets: Vec<(String, usize)> = config
            .images
            .iter()
            .map(|i| (i.docker.image.clone(), i.warm))
            .collect();
        let table = self.table();
        Capacity {
            node: config.name.clone(),
            capacity: table.capacity,
            leased: table.leases.len(),
            warm: table.warm_total(),
            starting: table.starting,
            available: table.available(),
            draining: table.closing,
            images: table.images(&targets),
        }
    }

    /// Stops serving new leases and removes every sandbox, warm and leased, also those whose
    /// removal was already under way.
    pub async fn shutdown(&self) {
        let all = self.table().drain();
        let docker = self.inner.docker.clone();
        futures::future::join_all(all.into_iter().map(|s| {
            let docker = docker.clone();
            async move {
                if let Err(e) = s.stop(&docker).await {
                    tracing::warn!(error = %e, "could not remove a sandbox at shutdown");
                }
            }
        }))
        .await;
        self.removals_done().await;
    }

    /// Takes no new leases, removes the warm sandboxes, and waits until every live lease is
    /// released or reaped, or `grace` has passed, or `cut_short` resolves. Renewals, releases
    /// and the proxy keep working meanwhile. Returns the leases still live at the end.
    pub async fn drain(
        &self,
        grace: Duration,
        cut_short: impl std::future::Future<Output = ()>,
    ) -> usize {
        let warm = self.table().close();
        for sandbox in warm {
            self.stop_later(sandbox);
        }
        let deadline = tokio::time::Instant::now() + grace;
        tracing::info!(
            leases = self.table().leases.len(),
            grace_secs = grace.as_secs_f64(),
            "draining: no new leases; waiting for the live ones"
        );
        let released = async {
            while !self.table().leases.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            () = released => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = cut_short => {}
        }
        self.table().leases.len()
    }

    /// Serves the API on `listener` until `shutdown` resolves, then removes every sandbox.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let app = routes::router(self.clone());
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|e| Error::io("serving the pool API", e));
        self.shutdown().await;
        served
    }

    /// Serves the API on `listener`; when `stop` resolves, [`drain`](Self::drain)s for the
    /// configured `drain_grace` (cut short by `force`) while still serving, then stops serving
    /// and removes every sandbox left.
    pub async fn serve_with_drain(
        &self,
        listener: tokio::net::TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
        force: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
        let pool = self.clone();
        let grace = self.inner.config.drain_grace;
        let drainer = tokio::spawn(async move {
            stop.await;
            let left = pool.drain(grace, force).await;
            if left > 0 {
                tracing::warn!(leases = left, "drain grace over; removing live leases");
            }
            let _ = drained_tx.send(());
        });
        let served = self
            .serve(listener, async move {
                let _ = drained_rx.await;
            })
            .await;
        drainer.abort();
        served
    }

    /// Removes a sandbox without making the caller wait.
    fn stop_later(&self, sandbox: Sandbox) {
        let inner = self.inner.clone();
        inner.removing.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let id = sandbox.id.clone();
            if let Err(e) = sandbox.stop(&inner.docker).await {
                tracing::warn!(lease = %id, error = %e, "could not remove a sandbox");
            }
            inner.removing.fetch_sub(1, Ordering::SeqCst);
            inner.removed.notify_waiters();
        });
    }

    /// Waits until every removal started by [`stop_later`](Self::stop_later) has finished.
    async fn removals_done(&self) {
        loop {
            let removed = self.inner.removed.notified();
            if self.inner.removing.load(Ordering::SeqCst) == 0 {
                return;
            }
            // Also on a timer: a notification between the load and the await is not lost,
            // but a bound keeps a stuck Docker call from hanging shutdown without a trace.
            let _ = tokio::time::timeout(Duration::from_secs(1), removed).await;
        }
    }

    /// URL of lease `id`'s server and the proxy to it, when `token` is its token.
    fn upstream(&self, id: &str, token: &str) -> Option<(String, proxy::Proxy)> {
        let table = self.table();
        let held = table.leases.get(id)?;
        tokens_match(&held.sandbox.token, token)
            .then(|| (held.sandbox.url.clone(), held.sandbox.proxy.clone()))
    }
}

/// A start in flight; its slot is given back when it ends, also when the start is cancelled.
struct StartSlot<'a> {
    pool: &'a Pool,
    warm_image: Option<String>,
}

impl<'a> StartSlot<'a> {
    fn new(pool: &'a Pool, warm_image: Option<String>) -> Self {
        Self { pool, warm_image }
    }
}

impl Drop for StartSlot<'_> {
    fn drop(&mut self) {
        self.pool.table().start_done(self.warm_image.as_deref());
    }
}

fn lease_not_found(id: &str) -> PoolError {
    PoolError::new(
        ErrorKind::LeaseNotFound,
        format!("no live lease `{id}` with this token (released, reaped or never granted)"),
    )
}

fn daemon_unavailable(why: &str) -> PoolError {
    PoolError::new(
        ErrorKind::DaemonUnavailable,
        format!("the pool's Docker daemon does not answer; retry later or ask another pool: {why}"),
    )
}

fn tokens_match(expected: &str, given: &str) -> bool {
    use subtle::ConstantTimeEq;
    !given.is_empty() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}
