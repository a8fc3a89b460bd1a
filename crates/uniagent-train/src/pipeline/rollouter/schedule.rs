//! The deterministic async schedule (`rl.async.deterministic`): which weight sync each group
//! of the RL phase starts on, as a function of the group's index and the knobs alone.
//!
//! Groups are numbered from 0 in the order the task source serves them. Group `g` runs on
//! the weights of sync `v(g)`, the earliest sync after which the staleness gate admits it:
//! the gate lets `per_period = ⌈(1 + staleness_threshold) · trigger_parameter_sync_step ·
//! groups_per_step⌉` groups start past those consumed at the last sync, so
//! `v(g) = ⌈(g + 1 − per_period) / per_sync⌉` (0 below `per_period`), with `per_sync =
//! trigger_parameter_sync_step · groups_per_step` groups consumed between two syncs. This is
//! the free-running rollouter's schedule when generation is never the bottleneck: every group
//! as stale as the knobs allow. Sync `k` waits until every group scheduled on an earlier sync
//! has finished, so no group straddles two versions and none of them is ever late.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uniagent_core::agent::Trajectory;
use uniagent_core::Result;

use super::super::config::AsyncConfig;
use super::super::tasks::TaskCursor;

/// The schedule of one RL phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    per_period: usize,
    per_sync: usize,
}

impl Schedule {
    pub(crate) fn new(knobs: &AsyncConfig, groups_per_step: usize) -> Self {
        let per_sync = knobs.trigger_parameter_sync_step.max(1) * groups_per_step.max(1);
        Self {
            per_period: per_period(knobs, groups_per_step),
            per_sync,
        }
    }

    /// The sync whose weights group `g` runs on (0: the weights RL starts from).
    pub(crate) fn sync_of(&self, g: usize) -> usize {
        (g + 1)
            .saturating_sub(self.per_period)
            .div_ceil(self.per_sync)
    }

    /// How many groups, counted from the first, sync `k` waits for: those scheduled on an
    /// earlier sync.
    pub(crate) fn groups_before_sync(&self, k: usize) -> usize {
        match k {
            0 => 0,
            k => (k - 1) * self.per_sync + self.per_period,
        }
    }
}

/// Groups the staleness gate lets start past those consumed at the last sync.
pub(crate) fn per_period(knobs: &AsyncConfig, groups_per_step: usize) -> usize {
    ((1.0 + knobs.staleness_threshold.max(0.0))
        * (knobs.trigger_parameter_sync_step.max(1) * groups_per_step) as f64)
        .ceil() as usize
}

/// One group as the trainer receives it, with where the schedule put it.
#[derive(Debug)]
pub(crate) struct Finished {
    /// The group's index in the phase (0 for the first group RL drew).
    pub(crate) group: usize,
    /// The task.
    pub(crate) task: String,
    /// The weight version the generator reported when the group started.
    pub(crate) version: u64,
    /// Its rollouts.
    pub(crate) result: Result<Vec<Trajectory>>,
}

/// Groups a deterministic run had finished but not trained on at a checkpoint, with where
/// the schedule stood: what a resumed run needs to continue on the same schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingGroups {
    /// The index of the first pending group (= groups trained on so far).
    pub(crate) first_group: usize,
    /// Weight syncs done.
    pub(crate) syncs: usize,
    /// The pending groups in order: `(task, weight version, rollouts)`.
    pub(crate) groups: Vec<(String, u64, Vec<Trajectory>)>,
}

/// Finished groups of a deterministic run, handed out in group order.
#[derive(Debug, Default)]
pub(crate) struct Ordered {
    /// Finished, not yet handed out.
    ready: BTreeMap<usize, Finished>,
    /// Every group below it has finished.
    finished_prefix: usize,
    /// The next group to hand out.
    next_out: usize,
    /// Groups drawn so far and the task cursor before each (those not handed out yet).
    cursors: BTreeMap<usize, TaskCursor>,
    /// The next group to draw.
    next_draw: usize,
}

impl Ordered {
    /// Starts at group `first` with `pending` (groups `first..`) already finished.
    pub(crate) fn starting_at(first: usize, pending: Vec<Finished>) -> Self {
        let mut ordered = Self {
            finished_prefix: first,
            next_out: first,
            next_draw: first + pending.len(),
            ..Self::default()
        };
        for group in pending {
            ordered.finish(group);
        }
        ordered
    }

    /// Records that the group `g`, about to be drawn, starts at `cursor`; returns `g`.
    pub(crate) fn draw(&mut self, cursor: TaskCursor) -> usize {
        let g = self.next_draw;
        self.cursors.insert(g, cursor);
        self.next_draw += 1;
        g
    }

    /// Stores a finished group.
    pub(crate) fn finish(&mut self, group: Finished) {
        self.ready.insert(group.group, group);
        while self.ready.contains_key(&self.finished_prefix) {
            self.finished_prefix += 1;
        }
    }

    /// Every group below this index has finished.
    pub(crate) fn finished_prefix(&self) -> usize {
        self.finished_prefix
    }

    /// The next group in order, if it has finished.
    pub(crate) fn take_next(&mut self) -> Option<Finished> {
        let group = self.ready.remove(&self.next_out)?;
        self.cursors.remove(&self.next_out);
        self.next_out += 1;
        Some(group)
    }

    /// Finished groups not handed out yet.
    pub(crate) fn queued(&self) -> usize {
        self.ready.len()
    }

    /// The task cursor before group `g` (`current`: the source's cursor, for a group not
    /// drawn yet, which must be the next one).
    pub(crate) fn cursor_before(&self, g: usize, current: TaskCursor) -> Option<TaskCursor> {
        match g == self.next_draw {
            true => Some(current),
            false => self.cursors.get(&g).copied(),
        }
    }

    /// The finished groups from the next one to hand out up to `end` (exclusive), cloned;
    /// `None` when one of them has not finished or failed.
    pub(crate) fn pending_until(&self, end: usize) -> Option<Vec<(String, u64, Vec<Trajectory>)>> {
        (self.next_out..end)
            .map(|g| {
                let f = self.ready.get(&g)?;
                let rollouts = f.result.as_ref().ok()?.clone();
                Some((f.task.clone(), f.version, rollouts))
            })
            .collect()
    }

    /// The next group to hand out.
    pub(crate) fn next_out(&self) -> usize {
        self.next_out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(staleness_threshold: f64, sync_every: usize) -> AsyncConfig {
        AsyncConfig {
            staleness_threshold,
            trigger_parameter_sync_step: sync_every,
            ..AsyncConfig::default()
        }
    }

    #[test]
    fn groups_run_as_stale_as_the_gate_allows() {
        // verl's default threshold, 4 groups a step, a sync every step: 6 groups on the
        // initial weights, then 4 per sync.
        let s = Schedule::new(&knobs(0.5, 1), 4);
        let syncs: Vec<usize> = (0..14).map(|g| s.sync_of(g)).collect();
        assert_eq!(syncs, [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(
            (0..4).map(|k| s.groups_before_sync(k)).collect::<Vec<_>>(),
            [0, 6, 10, 14]
        );
        // Threshold 0: on-policy but for the sync lag of one step (one-step off-policy).
        let s = Schedule::new(&knobs(0.0, 1), 2);
        let syncs: Vec<usize> = (0..6).map(|g| s.sync_of(g)).collect();
        assert_eq!(syncs, [0, 0, 1, 1, 2, 2]);
        // A sync every 2 steps of 2 groups, threshold 1: 8 groups, then 4 per sync.
        let s = Schedule::new(&knobs(1.0, 2), 2);
        let syncs: Vec<usize> = (0..13).map(|g| s.sync_of(g)).collect();
        assert_eq!(syncs, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2]);
    }

    #[test]
    fn no_group_waits_for_a_sync_that_needs_it_first() {
        // Every group of trainer step s runs on a sync done before step s, and sync k waits
        // only for groups of earlier syncs: the schedule cannot deadlock.
        for (threshold, every, per_step) in [(0.0, 1, 1), (0.5, 1, 4), (1.0, 2, 2), (2.5, 3, 5)] {
            let s = Schedule::new(&knobs(threshold, every), per_step);
            for step in 1..40usize {
                let syncs_before_step = (step - 1) / every;
                for g in (step - 1) * per_step..step * per_step {
                    assert!(s.sync_of(g) <= syncs_before_step, "{threshold} {every} {g}");
                }
            }
            for k in 1..20 {
                let waited = s.groups_before_sync(k);
                assert!((0..waited).all(|g| s.sync_of(g) < k));
                assert_eq!(s.sync_of(waited), k);
            }
        }
    }

    fn finished(group: usize) -> Finished {
        Finished {
            group,
            task: format!("t{group}"),
            version: 0,
            result: Ok(Vec::new()),
        }
    }

    #[test]
    fn finished_groups_come_out_in_order() {
        let cursor = |index| TaskCursor { epoch: 0, index };
        let mut o = Ordered::starting_at(3, vec![finished(3)]);
        assert_eq!(o.draw(cursor(4)), 4);
        assert_eq!(o.draw(cursor(5)), 5);
        o.finish(finished(5));
        assert_eq!(o.finished_prefix(), 4);
        assert_eq!(o.take_next().map(|f| f.group), Some(3));
        assert!(o.take_next().is_none(), "group 4 has not finished");
        assert_eq!(o.pending_until(6), None);
        o.finish(finished(4));
        assert_eq!(o.finished_prefix(), 6);
        assert_eq!(o.pending_until(6).map(|p| p.len()), Some(2));
        assert_eq!(o.cursor_before(5, cursor(9)), Some(cursor(5)));
        assert_eq!(o.cursor_before(6, cursor(9)), Some(cursor(9)));
        assert_eq!(o.take_next().map(|f| f.task), Some("t4".into()));
        assert_eq!(o.queued(), 1);
        assert_eq!(o.next_out(), 5);
    }
}
