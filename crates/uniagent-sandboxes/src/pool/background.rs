//! The pool's background tasks: the reaper of expired leases, the warm-pool refiller and the
//! Docker daemon's health probe ([`super::health`]). Each holds only a weak reference, so they
//! end when the pool is dropped.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::sandbox::Sandbox;
use super::{Inner, Pool, StartSlot};

/// How long a failed warm start keeps its slot before the refiller tries again, so that a
/// broken image does not turn into a tight loop of failing starts.
const WARM_FAILURE_BACKOFF: Duration = Duration::from_secs(2);

/// The oldest a warm sandbox gets before it is replaced (at most half the container's
/// lifetime, so that a lease taken from the warm pool still has most of it).
const MAX_WARM_AGE: Duration = Duration::from_secs(30 * 60);

pub(super) fn spawn(pool: &Pool) {
    let weak = Arc::downgrade(&pool.inner);
    tokio::spawn(reaper(weak.clone(), pool.inner.config.reap_interval));
    tokio::spawn(refiller(weak.clone(), pool.inner.config.reap_interval));
    tokio::spawn(super::health::prober(weak));
}

fn upgrade(weak: &Weak<Inner>) -> Option<Pool> {
    weak.upgrade().map(|inner| Pool { inner })
}

async fn reaper(weak: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = upgrade(&weak) else { return };
        let expired = pool.table().take_expired(Instant::now());
        if expired.is_empty() {
            continue;
        }
        tracing::info!(count = expired.len(), "reaping expired leases");
        for held in expired {
            pool.stop_later(held.sandbox);
        }
        pool.inner.refill.notify_one();
    }
}

async fn refiller(weak: Weak<Inner>, every: Duration) {
    loop {
        let Some(pool) = upgrade(&weak) else { return };
        // Starts against a daemon that does not answer would only pile up hung calls.
        let daemon_down = pool.inner.health.unhealthy().is_some();
        for image in &pool.inner.config.images {
            if image.warm == 0 || daemon_down {
                continue;
            }
            // A warm sandbox must leave its lease most of the container's lifetime.
            let max_age = image
                .docker
                .lifetime
                .map_or(MAX_WARM_AGE, |l| (l / 2).min(MAX_WARM_AGE));
            if let Some(oldest) = Instant::now().checked_sub(max_age) {
                let stale = pool.table().take_stale_warm(&image.docker.image, oldest);
                for sandbox in stale {
                    pool.stop_later(sandbox);
                }
            }
            while pool.table().reserve_warm(&image.docker.image, image.warm) {
                tokio::spawn(start_warm(pool.clone(), image.docker.image.clone()));
            }
        }
        let woken = pool.inner.clone();
        drop(pool);
        // Also on a timer: a slot freed by a failed start notifies nobody.
        let _ = tokio::time::timeout(every, woken.refill.notified()).await;
    }
}

async fn start_warm(pool: Pool, image: String) {
    let slot = StartSlot::new(&pool, Some(image.clone()));
    let Some(template) = pool.inner.config.image(&image) else {
        return;
    };
    let config = &pool.inner.config;
    match Sandbox::start(&config.name, &config.run_id(), &template.docker, None).await {
        Ok(sandbox) => {
            // One request through the proxy leaves a kept-alive connection behind, so the
            // client's first command does not pay for opening one.
            sandbox.proxy.warm_up(&sandbox.url, &sandbox.token).await;
            let mut table = pool.table();
            if table.closing {
                drop(table);
                pool.stop_later(sandbox);
            } else {
                table.warm.entry(image).or_default().push_back(sandbox);
            }
        }
        Err(e) => {
            tracing::warn!(image = %image, error = %e, "could not start a warm sandbox");
            tokio::time::sleep(WARM_FAILURE_BACKOFF).await;
        }
    }
    drop(slot);
    pool.inner.refill.notify_one();
}
