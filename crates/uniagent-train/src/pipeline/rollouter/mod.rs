//! The fully-async rollouter (verl's `fully_async_policy` semantics): rollout workers run one
//! task's group at a time and hand it to the trainer, concurrently with training, under a
//! staleness gate.
//!
//! - `staleness_threshold`: after each weight sync the rollouter may start at most
//!   `(1 + staleness_threshold) · trigger_parameter_sync_step · require_batches ·
//!   tasks_per_step` groups counted from those the trainer consumed; then it waits for the
//!   next sync, which bounds how old the weights behind a sample can be.
//! - `partial_rollout`: a sync happens between decoding batches while rollouts are in flight;
//!   they continue with the new weights and their tokens carry the version that produced each
//!   one. Without it, a sync waits for the rollouts in flight and holds new ones back.
//! - `deterministic`: the weights each group runs on follow the [`Schedule`], not the clock,
//!   and groups reach the trainer in the order they were drawn, so a seed fixes the run.

mod schedule;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify, RwLock, RwLockWriteGuard};
use uniagent_core::runner::{RolloutPhase, RolloutSource};
use uniagent_core::{Error, Result, Task, TokenGenerator};

use super::config::AsyncConfig;
use super::tasks::{TaskCursor, TaskSource};
use super::weight_sync::WeightSync;
pub(crate) use schedule::{Finished, PendingGroups};
use schedule::{Ordered, Schedule};

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
    /// Weight syncs done (counted from the start of RL, also across a resume).
    syncs: AtomicUsize,
    /// Workers still running.
    alive: AtomicUsize,
    /// Deterministic runs: the schedule and the groups in order.
    ordered: Option<(Schedule, Mutex<Ordered>)>,
    /// Free-running runs: the next group's index.
    drawn: AtomicUsize,
}

impl Gate {
    fn add_idle(&self, since: Instant) {
        if let Ok(mut idle) = self.idle.lock() {
            *idle += since.elapsed().as_secs_f64();
        }
    }

    /// Waits until `ready` holds, re-checking on every change; `false` when stopping.
    async fn wait_until(&self, mut ready: impl FnMut() -> bool) -> bool {
        loop {
            let notified = self.changed.notified();
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            if ready() {
                return true;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }

    /// Waits until one more group may start; `false` when stopping.
    async fn admit(&self) -> bool {
        self.wait_until(|| {
            let started = self.started.load(Ordering::SeqCst);
            started < self.allowed.load(Ordering::SeqCst)
                && self
                    .started
                    .compare_exchange(started, started + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
        })
        .await
    }

    fn ordered(&self) -> Result<std::sync::MutexGuard<'_, Ordered>> {
        let (_, ordered) = self
            .ordered
            .as_ref()
            .ok_or_else(|| Error::internal("the rollouter is not deterministic"))?;
        ordered
            .lock()
            .map_err(|_| Error::internal("rollouter lock poisoned"))
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

/// What a rollout worker runs on.
#[derive(Clone)]
pub(crate) struct RolloutSide {
    pub generator: Arc<dyn TokenGenerator>,
    pub spec: Arc<dyn RolloutSource>,
    pub source: Arc<Mutex<TaskSource>>,
    /// Reports the weight version a group starts on.
    pub sync: Arc<dyn WeightSync>,
}

/// The running rollouter; [`Rollouter::stop`] ends its workers.
pub(crate) struct Rollouter {
    gate: Arc<Gate>,
    handles: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
    workers: usize,
    knobs: AsyncConfig,
    per_period: usize,
    source: Arc<Mutex<TaskSource>>,
    /// Free-running runs: finished groups in the order they finished.
    queue: Option<mpsc::Receiver<Finished>>,
}

impl Rollouter {
    /// Starts the workers. A deterministic run resumed from a checkpoint passes the groups
    /// the checkpoint holds (the task source must stand at the checkpoint's cursor).
    pub(crate) fn start(
        side: RolloutSide,
        plan: RolloutPlan,
        knobs: AsyncConfig,
        resumed: Option<PendingGroups>,
    ) -> Self {
        let per_period = schedule::per_period(&knobs, plan.groups_per_step);
        let workers = (plan.concurrency / plan.samples.max(1) as usize).max(1);
        let (ordered, syncs) = match knobs.deterministic {
            true => {
                let (first, syncs, pending) = match resumed {
                    Some(p) => (p.first_group, p.syncs, p.groups),
                    None => (0, 0, Vec::new()),
                };
                let pending = pending
                    .into_iter()
                    .enumerate()
                    .map(|(i, (task, version, rollouts))| Finished {
                        group: first + i,
                        task,
                        version,
                        result: Ok(rollouts),
                    })
                    .collect();
                let schedule = Schedule::new(&knobs, plan.groups_per_step);
                (
                    Some((schedule, Mutex::new(Ordered::starting_at(first, pending)))),
                    syncs,
                )
            }
            false => (None, 0),
        };
        let gate = Arc::new(Gate {
            started: AtomicUsize::new(0),
            allowed: AtomicUsize::new(per_period),
            changed: Notify::new(),
            stop: AtomicBool::new(false),
            sync: RwLock::new(()),
            idle: Mutex::new(0.0),
            syncs: AtomicUsize::new(syncs),
            alive: AtomicUsize::new(workers),
            ordered,
            drawn: AtomicUsize::new(0),
        });
        let (tx, rx) = mpsc::channel(per_period.max(1));
        let deterministic = gate.ordered.is_some();
        let handles = (0..workers)
            .map(|_| {
                let (side, plan, gate) = (side.clone(), plan.clone(), gate.clone());
                let tx = (!deterministic).then(|| tx.clone());
                tokio::spawn(async move {
                    match tx {
                        Some(tx) => free_worker(side, plan, knobs, &gate, tx).await,
                        None => ordered_worker(side, plan, &gate).await,
                    }
                    gate.alive.fetch_sub(1, Ordering::SeqCst);
                    gate.changed.notify_waiters();
                })
            })
            .collect();
        Self {
            gate,
            handles,
            started: Instant::now(),
            workers,
            knobs,
            per_period,
            source: side.source,
            queue: (!deterministic).then_some(rx),
        }
    }

    /// The next finished group: in draw order when deterministic, else in finishing order;
    /// `None` once the task source is exhausted.
    pub(crate) async fn next(&mut self) -> Option<Finished> {
        if let Some(rx) = &mut self.queue {
            let group = rx.recv().await;
            crate::telemetry::queued_groups(rx.len());
            return group;
        }
        let gate = self.gate.clone();
        let mut out = None;
        gate.wait_until(|| match gate.ordered() {
            Ok(mut o) => {
                out = o.take_next();
                crate::telemetry::queued_groups(o.queued());
                out.is_some() || gate.alive.load(Ordering::SeqCst) == 0
            }
            Err(_) => true,
        })
        .await;
        out
    }

    /// Before a weight sync: a deterministic run waits until every group scheduled on an
    /// earlier sync has finished; otherwise, without partial rollouts, waits for the rollouts
    /// in flight and holds new ones back until the returned guard is dropped.
    pub(crate) async fn pause(&self) -> Option<RwLockWriteGuard<'_, ()>> {
        if let Some((schedule, _)) = &self.gate.ordered {
            let next = self.gate.syncs.load(Ordering::SeqCst) + 1;
            let needed = schedule.groups_before_sync(next);
            let gate = &self.gate;
            gate.wait_until(|| {
                gate.alive.load(Ordering::SeqCst) == 0
                    || gate
                        .ordered()
                        .map_or(true, |o| o.finished_prefix() >= needed)
            })
            .await;
            return None;
        }
        if self.knobs.partial_rollout {
            None
        } else {
            Some(self.gate.sync.write().await)
        }
    }

    /// After a weight sync: lets the rollouter run ahead by another period counted from the
    /// `consumed` groups (deterministic: starts the groups scheduled on this sync).
    pub(crate) fn release(&self, consumed: usize) {
        self.gate.syncs.fetch_add(1, Ordering::SeqCst);
        self.gate
            .allowed
            .store(consumed + self.per_period, Ordering::SeqCst);
        self.gate.changed.notify_waiters();
    }

    /// What a checkpoint of a deterministic run saves besides the trainer: the task cursor
    /// before the first group scheduled on the current sync, and the finished groups before
    /// it that the trainer has not consumed. Right after a sync those have all finished.
    pub(crate) fn resume_point(&self) -> Result<(TaskCursor, PendingGroups)> {
        let (schedule, _) = self
            .gate
            .ordered
            .as_ref()
            .ok_or_else(|| Error::internal("only a deterministic run saves its schedule"))?;
        let syncs = self.gate.syncs.load(Ordering::SeqCst);
        let end = schedule.groups_before_sync(syncs);
        // Lock order: source, then the ordered groups (as the workers draw).
        let source = self
            .source
            .lock()
            .map_err(|_| Error::internal("task source lock poisoned"))?;
        let ordered = self.gate.ordered()?;
        let first = ordered.next_out();
        let missing = || {
            Error::internal(format!(
                "the groups before group {end} are not all finished at a sync"
            ))
        };
        let cursor = ordered
            .cursor_before(end, source.cursor())
            .ok_or_else(missing)?;
        let groups = ordered.pending_until(end).ok_or_else(missing)?;
        Ok((
            cursor,
            PendingGroups {
                first_group: first,
                syncs,
                groups,
            },
        ))
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

/// Runs one group of `task` on the generator as it is now.
async fn run_group(side: &RolloutSide, plan: &RolloutPlan, group: usize, task: Task) -> Finished {
    let id = task.id.clone();
    let version = side.sync.version();
    let phase = RolloutPhase::sampled(
        vec![task],
        plan.samples,
        plan.temperature,
        plan.samples as usize,
    );
    Finished {
        group,
        task: id,
        version,
        result: side.spec.run(side.generator.clone(), phase).await,
    }
}

/// A worker of a free-running rollouter: starts groups as the staleness gate admits them.
async fn free_worker(
    side: RolloutSide,
    plan: RolloutPlan,
    knobs: AsyncConfig,
    gate: &Gate,
    tx: mpsc::Sender<Finished>,
) {
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
        let Some((group, task)) = side.source.lock().ok().and_then(|mut s| {
            let task = s.next_task()?;
            Some((gate.drawn.fetch_add(1, Ordering::SeqCst), task))
        }) else {
            break;
        };
        let finished = run_group(&side, &plan, group, task).await;
        drop(guard);
        let t1 = Instant::now();
        if tx.send(finished).await.is_err() {
            break;
        }
        gate.add_idle(t1);
    }
}

/// A worker of a deterministic rollouter: draws the next group, waits for the sync the
/// schedule gives it, runs it and files it in order.
async fn ordered_worker(side: RolloutSide, plan: RolloutPlan, gate: &Gate) {
    let Some((schedule, _)) = &gate.ordered else {
        return;
    };
    loop {
        let t0 = Instant::now();
        // Drawn under both locks, so group numbers follow the source's order.
        let drawn = side.source.lock().ok().and_then(|mut s| {
            let cursor = s.cursor();
            let task = s.next_task()?;
            Some((gate.ordered().ok()?.draw(cursor), task))
        });
        let Some((group, task)) = drawn else {
            break;
        };
        let wanted = schedule.sync_of(group);
        if !gate
            .wait_until(|| gate.syncs.load(Ordering::SeqCst) >= wanted)
            .await
        {
            break;
        }
        gate.add_idle(t0);
        let finished = run_group(&side, &plan, group, task).await;
        match gate.ordered() {
            Ok(mut o) => o.finish(finished),
            Err(_) => break,
        }
        gate.changed.notify_waiters();
    }
}
