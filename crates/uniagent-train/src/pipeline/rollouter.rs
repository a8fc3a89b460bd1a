//! The fully-async rollouter (verl's `fully_async_policy` semantics): rollout workers run one
//! task's group at a time and queue it, concurrently with the trainer, under a staleness gate.
//!
//! - `staleness_threshold`: after each weight sync the rollouter may start at most
//!   `(1 + staleness_threshold) · trigger_parameter_sync_step · require_batches ·
//!   tasks_per_step` groups counted from those the trainer consumed; then it waits for the
//!   next sync, which bounds how old the weights behind a sample can be.
//! - `partial_rollout`: a sync happens between decoding batches while rollouts are in flight;
//!   they continue with the new weights and their tokens carry the version that produced each
//!   one. Without it, a sync waits for the rollouts in flight and holds new ones back.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify, RwLock, RwLockWriteGuard};
use uniagent_core::agent::Trajectory;
use uniagent_core::{Result, TokenGenerator};

use super::config::AsyncConfig;
use super::tasks::TaskSource;
use uniagent_core::runner::{RolloutPhase, RolloutSource};

/// Shared state of the rollouter.
struct Gate {
    started: AtomicUsize,
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

/// How a rollouter samples.
#[derive(Debug, Clone)]
pub(crate) struct RolloutPlan {
    pub samples: u32,
    pub temperature: f64,
    pub concurrency: usize,
    pub groups_per_step: usize,
}

/// The running rollouter; [`Rollouter::stop`] ends its workers.
pub(crate) struct Rollouter {
    gate: Arc<Gate>,
    handles: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
    workers: usize,
    knobs: AsyncConfig,
    per_period: usize,
}

impl Rollouter {
    /// Starts the workers; returns the rollouter and the queue of finished groups (`None`
    /// once the task source is exhausted).
    pub(crate) fn start(
        generator: Arc<dyn TokenGenerator>,
        spec: Arc<dyn RolloutSource>,
        source: Arc<Mutex<TaskSource>>,
        plan: RolloutPlan,
        knobs: AsyncConfig,
    ) -> (Self, mpsc::Receiver<Result<Vec<Trajectory>>>) {
        let per_period = ((1.0 + knobs.staleness_threshold.max(0.0))
            * (knobs.trigger_parameter_sync_step.max(1) * plan.groups_per_step) as f64)
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
        let workers = (plan.concurrency / plan.samples.max(1) as usize).max(1);
        let mut handles = Vec::new();
        for _ in 0..workers {
            let (generator, spec, tx, gate, source, plan) = (
                generator.clone(),
                spec.clone(),
                tx.clone(),
                gate.clone(),
                source.clone(),
                plan.clone(),
            );
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
                    let Some(task) = source.lock().ok().and_then(|mut s| s.next_task()) else {
                        break;
                    };
                    let group = spec
                        .run(
                            generator.clone(),
                            RolloutPhase::sampled(
                                vec![task],
                                plan.samples,
                                plan.temperature,
                                plan.samples as usize,
                            ),
                        )
                        .await;
                    drop(guard);
                    let t1 = Instant::now();
                    if tx.send(group).await.is_err() {
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

    /// Before a weight sync: without partial rollouts, waits for the rollouts in flight and
    /// holds new ones back until the returned guard is dropped.
    pub(crate) async fn pause(&self) -> Option<RwLockWriteGuard<'_, ()>> {
        if self.knobs.partial_rollout {
            None
        } else {
            Some(self.gate.sync.write().await)
        }
    }

    /// After a weight sync: lets the rollouter run ahead by another period counted from the
    /// `consumed` groups.
    pub(crate) fn release(&self, consumed: usize) {
        self.gate
            .allowed
            .store(consumed + self.per_period, Ordering::SeqCst);
        self.gate.changed.notify_waiters();
    }

    /// Stops the workers and returns the rollout idle ratio (time waiting over worker time).
    pub(crate) async fn stop(self) -> f64 {
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
