//! The pool's bookkeeping, without I/O: leases, warm sandboxes per image, and the slots that
//! bound them together.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::sandbox::Sandbox;
use crate::leases::{unix_now, ImageCapacity, LeaseInfo};

/// A leased sandbox.
#[derive(Debug)]
pub(crate) struct Held {
    pub sandbox: Sandbox,
    pub image: String,
    pub client: Option<String>,
    pub ttl: Duration,
    pub expires: Instant,
    pub recovered: bool,
    /// Taken from the warm pool.
    pub warm: bool,
}

impl Held {
    pub(crate) fn expires_at(&self, now: Instant) -> f64 {
        unix_now() + self.expires.saturating_duration_since(now).as_secs_f64()
    }

    pub(crate) fn info(&self, now: Instant) -> LeaseInfo {
        LeaseInfo {
            id: self.sandbox.id.clone(),
            image: self.image.clone(),
            client: self.client.clone(),
            ttl_secs: self.ttl.as_secs_f64(),
            expires_at: self.expires_at(now),
            recovered: self.recovered,
        }
    }
}

/// What [`Table::reserve`] decided.
#[derive(Debug)]
pub(crate) enum Reservation {
    /// A warm sandbox, now the caller's.
    Warm(Sandbox),
    /// A slot to start one in (counted as starting until [`Table::start_done`]); `evicted` is
    /// a warm sandbox of another image that gave up its slot and must be stopped.
    Cold { evicted: Option<Sandbox> },
    /// No slot is free.
    Full,
    /// The pool is shutting down.
    Closing,
}

/// Leases, warm pools and slots.
#[derive(Debug, Default)]
pub(crate) struct Table {
    pub capacity: usize,
    pub leases: HashMap<String, Held>,
    pub warm: HashMap<String, VecDeque<Sandbox>>,
    /// Starts in flight, for leases and for warm pools.
    pub starting: usize,
    /// Warm starts in flight per image (also counted in `starting`).
    pub warm_starting: HashMap<String, usize>,
    pub closing: bool,
}

impl Table {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    fn warm_count(&self) -> usize {
        self.warm.values().map(VecDeque::len).sum()
    }

    /// Slots in use: leased, warm and starting.
    pub(crate) fn used(&self) -> usize {
        self.leases.len() + self.warm_count() + self.starting
    }

    /// Takes a warm sandbox of `image` when `warm_ok`, else a free slot, else the slot of a
    /// warm sandbox of another image.
    pub(crate) fn reserve(&mut self, image: &str, warm_ok: bool) -> Reservation {
        if self.closing {
            return Reservation::Closing;
        }
        if warm_ok {
            if let Some(sandbox) = self.warm.get_mut(image).and_then(VecDeque::pop_front) {
                return Reservation::Warm(sandbox);
            }
        }
        if self.used() < self.capacity {
            self.starting += 1;
            return Reservation::Cold { evicted: None };
        }
        let other = self
            .warm
            .iter_mut()
            .filter(|(key, queue)| (key.as_str() != image || !warm_ok) && !queue.is_empty())
            .max_by_key(|(_, queue)| queue.len())
            .and_then(|(_, queue)| queue.pop_back());
        match other {
            Some(evicted) => {
                self.starting += 1;
                Reservation::Cold {
                    evicted: Some(evicted),
                }
            }
            None => Reservation::Full,
        }
    }

    /// A warm start for `image` when its pool is below `target` and a slot is free.
    pub(crate) fn reserve_warm(&mut self, image: &str, target: usize) -> bool {
        let ready = self.warm.get(image).map_or(0, VecDeque::len);
        let starting = self.warm_starting.get(image).copied().unwrap_or(0);
        if self.closing || ready + starting >= target || self.used() >= self.capacity {
            return false;
        }
        self.starting += 1;
        *self.warm_starting.entry(image.to_owned()).or_default() += 1;
        true
    }

    /// A start reserved by [`reserve`](Self::reserve) or [`reserve_warm`](Self::reserve_warm)
    /// ended.
    pub(crate) fn start_done(&mut self, warm_image: Option<&str>) {
        self.starting = self.starting.saturating_sub(1);
        if let Some(image) = warm_image {
            if let Some(n) = self.warm_starting.get_mut(image) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Removes and returns the leases that expired by `now`.
    pub(crate) fn take_expired(&mut self, now: Instant) -> Vec<Held> {
        let ids: Vec<String> = self
            .leases
            .iter()
            .filter(|(_, held)| held.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| self.leases.remove(&id))
            .collect()
    }

    /// Removes and returns the warm sandboxes of `image` started before `oldest`.
    pub(crate) fn take_stale_warm(&mut self, image: &str, oldest: Instant) -> Vec<Sandbox> {
        let Some(queue) = self.warm.get_mut(image) else {
            return Vec::new();
        };
        let (stale, fresh): (Vec<_>, Vec<_>) = queue.drain(..).partition(|s| s.started < oldest);
        queue.extend(fresh);
        stale
    }

    /// Closes the table to new leases and warm starts and returns its warm sandboxes; the
    /// leased ones stay until released, reaped or [`drain`](Self::drain)ed.
    pub(crate) fn close(&mut self) -> Vec<Sandbox> {
        self.closing = true;
        self.warm.drain().flat_map(|(_, queue)| queue).collect()
    }

    /// Closes the table and returns every sandbox it holds.
    pub(crate) fn drain(&mut self) -> Vec<Sandbox> {
        let mut all = self.close();
        all.extend(self.leases.drain().map(|(_, h)| h.sandbox));
        all
    }

    /// Per image: its warm target and how many are ready.
    pub(crate) fn images(&self, targets: &[(String, usize)]) -> Vec<ImageCapacity> {
        targets
            .iter()
            .map(|(image, target)| ImageCapacity {
                image: image.clone(),
                warm_target: *target,
                warm: self.warm.get(image).map_or(0, VecDeque::len),
            })
            .collect()
    }

    /// Leases a client can get without waiting: free slots plus warm sandboxes.
    pub(crate) fn available(&self) -> usize {
        if self.closing {
            return 0;
        }
        self.capacity.saturating_sub(self.used()) + self.warm_count()
    }

    pub(crate) fn warm_total(&self) -> usize {
        self.warm_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str, expires: Instant) -> Held {
        Held {
            sandbox: Sandbox::detached(id),
            image: "a".into(),
            client: None,
            ttl: Duration::from_secs(1),
            expires,
            recovered: false,
            warm: false,
        }
    }

    #[test]
    fn slots_bound_leased_warm_and_starting_together() {
        let mut table = Table::new(3);
        assert!(table.reserve_warm("a", 1));
        assert!(
            !table.reserve_warm("a", 1),
            "one warm start in flight is the target"
        );
        table.start_done(Some("a"));
        table
            .warm
            .entry("a".into())
            .or_default()
            .push_back(Sandbox::detached("w"));
        assert!(matches!(table.reserve("a", true), Reservation::Warm(_)));
        assert!(matches!(
            table.reserve("a", true),
            Reservation::Cold { evicted: None }
        ));
        assert!(matches!(
            table.reserve("a", true),
            Reservation::Cold { evicted: None }
        ));
        table.leases.insert("x".into(), held("x", Instant::now()));
        assert_eq!(table.used(), 3, "one lease and two starts");
        assert!(matches!(table.reserve("a", true), Reservation::Full));
        assert_eq!(table.available(), 0);
        table.start_done(None);
        table.start_done(None);
        assert_eq!(table.available(), 2);
    }

    #[test]
    fn a_full_pool_gives_up_a_warm_sandbox_of_another_image_but_never_its_own() {
        let mut table = Table::new(1);
        table
            .warm
            .entry("b".into())
            .or_default()
            .push_back(Sandbox::detached("wb"));
        match table.reserve("a", true) {
            Reservation::Cold { evicted: Some(s) } => assert_eq!(s.id, "wb"),
            other => panic!("{other:?}"),
        }
        table.start_done(None);
        table
            .warm
            .entry("a".into())
            .or_default()
            .push_back(Sandbox::detached("wa"));
        // Other limits than the template's cannot use the warm one, nor evict it for nothing.
        match table.reserve("a", false) {
            Reservation::Cold { evicted: Some(s) } => assert_eq!(s.id, "wa"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn warm_sandboxes_retire_by_age_and_the_young_stay_in_order() {
        let mut table = Table::new(4);
        let queue = table.warm.entry("a".into()).or_default();
        queue.push_back(Sandbox::detached("old"));
        let cut = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        queue.push_back(Sandbox::detached("young"));
        let stale = table.take_stale_warm("a", cut + Duration::from_millis(1));
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].id, "old");
        assert_eq!(table.warm["a"][0].id, "young");
        assert!(table.take_stale_warm("b", cut).is_empty());
    }

    #[test]
    fn only_expired_leases_are_taken_and_a_closed_table_grants_nothing() {
        let now = Instant::now();
        let mut table = Table::new(4);
        table
            .leases
            .insert("old".into(), held("old", now - Duration::from_millis(1)));
        table
            .leases
            .insert("new".into(), held("new", now + Duration::from_secs(5)));
        let expired = table.take_expired(now);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].sandbox.id, "old");
        assert!(table.leases.contains_key("new"));
        assert_eq!(table.drain().len(), 1);
        assert!(matches!(table.reserve("a", true), Reservation::Closing));
        assert!(!table.reserve_warm("a", 1));
    }
}
