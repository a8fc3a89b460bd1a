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
}

/// A deterministic rollouter's schedule and its groups in draw order, shared by its workers.
struct Scheduled {
    schedule: Schedule,
    groups: Mutex<Ordered>,
}

impl Scheduled {
    fn groups(&self) -> Result<std::sync::MutexGuard<'_, Ordered>> {
        self.groups
            .lock()
            .map_err(|_| Error::internal("rollouter lock poisoned"))
    }
}

/// What one worker holds of its rollouter's mode.
#[derive(Clone)]
enum Work {
    /// The queue's sender and the counter that numbers groups as they are drawn.
    Free(mpsc::Sender<Finished>, Arc<AtomicUsize>),
    Ordered(Arc<Scheduled>),
}

/// Where finished groups come out: the two modes of a rollouter, each with only its state.
enum Output {
    /// Free-running: in the order they finished.
    Queue(mpsc::Receiver<Finished>),
    /// Deterministic: in draw order, each on the sync its schedule gives it.
    Ordered(Arc<Scheduled>),
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
    output: Output,
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
        let (scheduled, syncs) = match knobs.deterministic {
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
                let scheduled = Scheduled {
                    schedule: Schedule::new(&knobs, plan.groups_per_step),
                    groups: Mutex::new(Ordered::starting_at(first, pending)),
                };
                (Some(Arc::new(scheduled)), syncs)
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
        });
        // Free-running: the workers send finished groups down one channel and number them
        // from one counter. Deterministic: they file them in the shared order.
        // The queue closes once the last worker drops its clone of `work`'s sender.
        let (output, work) = match scheduled {
            Some(scheduled) => (Output::Ordered(scheduled.clone()), Work::Ordered(scheduled)),
            None => {
                let (tx, rx) = mpsc::channel(per_period.max(1));
                (
                    Output::Queue(rx),
                    Work::Free(tx, Arc::new(AtomicUsize::new(0))),
                )
            }
        };
        let handles = (0..workers)
            .map(|_| {
                let (side, plan, gate) = (side.clone(), plan.clone(), gate.clone());
                let work = work.clone();
                tokio::spawn(async move {
                    match work {
                        Work::Free(tx, drawn) => {
                            free_worker(side, plan, knobs, &gate, tx, &drawn).await
                        }
                        Work::Ordered(scheduled) => {
                            ordered_worker(side, plan, &gate, &scheduled).await
                        }
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
            output,
        }
    }

    /// The next finished group: in draw order when deterministic, else in finishing order;
    /// `None` once the task source is exhausted.
    pub(crate) async fn next(&mut self) -> Option<Finished> {
        let scheduled = match &mut self.output {
            Output::Queue(rx) => {
                let group = rx.recv().await;
                crate::telemetry::queued_groups(rx.len());
                return group;
            }
            Output::Ordered(scheduled) => scheduled.clone(),
        };
        let gate = &self.gate;
        let mut out = None;
        gate.wait_until(|| match scheduled.groups() {
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
        if let Output::Ordered(scheduled) = &self.output {
            let next = self.gate.syncs.load(Ordering::SeqCst) + 1;
            let needed = scheduled.schedule.groups_before_sync(next);
            let gate = &self.gate;
            gate.wait_until(|| {
                gate.alive.load(Ordering::SeqCst) == 0
                    || scheduled
                        .groups()
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
        let Output::Ordered(scheduled) = &self.output else {
            return Err(Error::internal(
                "only a deterministic run saves its schedule",
            ));
        };
        let syncs = self.gate.syncs.load(Ordering::SeqCst);
        let end = scheduled.schedule.groups_before_sync(syncs);
        // Lock order: source, then the ordered groups (as the workers draw).
        let source = self
            .source
            .lock()
            .map_err(|_| Error::internal("task source lock poisoned"))?;
        let ordered = scheduled.groups()?;
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
    drawn: &AtomicUsize,
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
            Some((drawn.fetch_add(1, Ordering::SeqCst), task))
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
async fn ordered_worker(side: RolloutSide, plan: RolloutPlan, gate: &Gate, scheduled: &Scheduled) {
    loop {
        let t0 = Instant::now();
        // Drawn under both locks, so group numbers follow the source's order.
        let drawn = side.source.lock().ok().and_then(|mut s| {
            let cursor = s.cursor();
            let task = s.next_task()?;
            Some((scheduled.groups().ok()?.draw(cursor), task))
        });
        let Some((group, task)) = drawn else {
            break;
        };
        let wanted = scheduled.schedule.sync_of(group);
        if !gate
            .wait_until(|| gate.syncs.load(Ordering::SeqCst) >= wanted)
            .await
        {
            break;
        }
        gate.add_idle(t0);
        let finished = run_group(&side, &plan, group, task).await;
        match scheduled.groups() {
            Ok(mut o) => o.finish(finished),
            Err(_) => break,
        }
        gate.changed.notify_waiters();
    }
}
