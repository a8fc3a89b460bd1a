//! The fully-async pipeline (verl's `fully_async_policy` semantics): rollout workers and the
//! trainer run concurrently around a bounded queue of finished groups.
//!
//! - `staleness_threshold`: after each parameter sync the rollouter may produce at most
//!   `(1 + staleness_threshold) · trigger_parameter_sync_step · tasks_per_step` new groups;
//!   then it waits for the next sync, bounding how old the weights behind a sample can be.
//! - `trigger_parameter_sync_step`: the trainer pushes its weights to the generation engine
//!   every this many optimizer steps.
//! - `partial_rollout`: with it, a sync happens between decoding batches while rollouts are in
//!   flight, which continue with the new weights (their tokens then carry several weight
//!   versions); without it, a sync waits for the rollouts in flight to finish and holds new
//!   ones back until it is done.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify, RwLock};
use uniagent_core::agent::Trajectory;
use uniagent_core::codec::Codec;
use uniagent_core::{Result, TokenGenerator};

use crate::rollout::{run_rollouts, RolloutSettings};
use crate::task::FileQuestion;

/// The async knobs, named as in verl.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsyncKnobs {
    /// Extra fraction of a sync period the rollouter may run ahead.
    pub staleness_threshold: f64,
    /// Rollouts in flight continue across a weight sync.
    pub partial_rollout: bool,
    /// Trainer steps between weight syncs.
    pub trigger_parameter_sync_step: usize,
}

impl Default for AsyncKnobs {
    fn default() -> Self {
        Self {
            staleness_threshold: 0.5,
            partial_rollout: true,
            trigger_parameter_sync_step: 1,
        }
    }
}

/// Shared state of the rollouter.
struct Gate {
    /// Groups the rollouter has started.
    started: AtomicUsize,
    /// Groups it may start before the next sync.
    allowed: AtomicUsize,
    changed: Notify,
    stop: AtomicBool,
    /// Held (read) by every rollout in flight when partial rollouts are off.
    sync: RwLock<()>,
    /// Seconds rollout workers spent waiting (gate, queue, sync).
    idle: Mutex<f64>,
}

impl Gate {
    fn add_idle(&self, since: Instant) {
        if let Ok(mut idle) = self.idle.lock() {
            *idle += since.elapsed().as_secs_f64();
        }
    }

    /// Waits until one more group may start; `false` when stopping.
    async fn admit(&self) -> bool {
        loop {
            let notified = self.changed.notified();
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            let started = self.started.load(Ordering::SeqCst);
            if started < self.allowed.load(Ordering::SeqCst)
                && self
                    .started
                    .compare_exchange(started, started + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                return true;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }
}

/// The rollouter: `workers` loops that each run one task's group at a time and queue it.
pub struct Rollouter {
    gate: Arc<Gate>,
    handles: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
    workers: usize,
    knobs: AsyncKnobs,
    per_period: usize,
}

impl Rollouter {
    /// Starts the workers; returns the rollouter and the queue of finished groups.
    pub fn start(
        generator: Arc<dyn TokenGenerator>,
        codec: Arc<Codec>,
        settings: RolloutSettings,
        tasks_per_step: usize,
        knobs: AsyncKnobs,
        files_per_task: usize,
        seed: u64,
    ) -> (Self, mpsc::Receiver<Result<Vec<Trajectory>>>) {
        let per_period = ((1.0 + knobs.staleness_threshold.max(0.0))
            * (knobs.trigger_parameter_sync_step.max(1) * tasks_per_step) as f64)
            .ceil() as usize;
        let (tx, rx) = mpsc::channel(per_period.max(1));
        let gate = Arc::new(Gate {
            started: AtomicUsize::new(0),
            allowed: AtomicUsize::new(per_period),
            changed: Notify::new(),
            stop: AtomicBool::new(false),
            sync: RwLock::new(()),
            idle: Mutex::new(0.0),
        });
        let rng = Arc::new(Mutex::new(fastrand::Rng::with_seed(seed)));
        let counter = Arc::new(AtomicUsize::new(0));
        let workers = (settings.concurrency / settings.samples_per_task.max(1) as usize).max(1);
        let mut handles = Vec::new();
        for _ in 0..workers {
            let (generator, codec, settings, tx) = (
                generator.clone(),
                codec.clone(),
                settings.clone(),
                tx.clone(),
            );
            let (gate, rng, counter) = (gate.clone(), rng.clone(), counter.clone());
            handles.push(tokio::spawn(async move {
                loop {
                    let t0 = Instant::now();
                    if !gate.admit().await {
                        break;
                    }
                    let guard = if knobs.partial_rollout {
                        None
                    } else {
                        Some(gate.sync.read().await)
                    };
                    gate.add_idle(t0);
                    let k = counter.fetch_add(1, Ordering::SeqCst);
                    let task = match rng.lock() {
                        Ok(mut rng) => {
                            FileQuestion::generate(format!("rla{k}"), files_per_task, &mut rng)
                        }
                        Err(_) => break,
                    };
                    let ts = run_rollouts(
                        generator.clone(),
                        codec.clone(),
                        vec![task.to_task()],
                        &settings,
                    )
                    .await;
                    drop(guard);
                    let t1 = Instant::now();
                    if tx.send(ts).await.is_err() {
                        break;
                    }
                    gate.add_idle(t1);
                }
            }));
        }
        let rollouter = Self {
            gate,
            handles,
            started: Instant::now(),
            workers,
            knobs,
            per_period,
        };
        (rollouter, rx)
    }

    /// Runs `update` (the weight sync) under verl's rules, then lets the rollouter run ahead
    /// by another period counted from the `consumed` groups.
    pub async fn sync<T>(&self, consumed: usize, update: impl FnOnce() -> T) -> T {
        let out = if self.knobs.partial_rollout {
            update()
        } else {
            let _exclusive = self.gate.sync.write().await;
            update()
        };
        self.gate
            .allowed
            .store(consumed + self.per_period, Ordering::SeqCst);
        self.gate.changed.notify_waiters();
        out
    }

    /// Stops the workers and returns the rollout idle ratio (time waiting over worker time).
    pub async fn stop(self) -> f64 {
        self.gate.stop.store(true, Ordering::SeqCst);
        self.gate.changed.notify_waiters();
        let total = self.started.elapsed().as_secs_f64() * self.workers as f64;
        for h in self.handles {
            h.abort();
            let _ = h.await;
        }
        let idle = self.gate.idle.lock().map_or(0.0, |i| *i);
        (idle / total.max(1e-9)).min(1.0)
    }
}
