//! A core's named deadlines.
//!
//! Modelled on quinn-proto's `TimerTable`: the core arms and cancels timers
//! by name, the driver asks for [`TimerTable::next_deadline`] and waits until
//! then, and the core then drains what is due with
//! [`TimerTable::pop_expired`]. The table never waits itself.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;

use crate::Instant;

/// Deadlines keyed by timer name, at most one per key.
///
/// `K` is usually a small enum of the core's timers, possibly carrying data
/// (`Probe(NodeId)`). Kept in a `BTreeMap` so that the table is `Hash + Eq`
/// and every walk over it is in key order, the same on every run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimerTable<K> {
    deadlines: BTreeMap<K, Instant>,
}

impl<K> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable { deadlines: BTreeMap::new() }
    }
}

impl<K: Copy + Ord + Hash + Debug> TimerTable<K> {
    /// A table with no timer armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `k` to fire at `at`, replacing any earlier deadline it had.
    pub fn set(&mut self, k: K, at: Instant) {
        self.deadlines.insert(k, at);
    }

    /// Disarms `k`; nothing happens if it was not armed.
    pub fn cancel(&mut self, k: K) {
        self.deadlines.remove(&k);
    }

    /// The deadline of `k`, if armed.
    pub fn get(&self, k: K) -> Option<Instant> {
        self.deadlines.get(&k).copied()
    }

    /// Whether `k` is armed.
    pub fn is_armed(&self, k: K) -> bool {
        self.deadlines.contains_key(&k)
    }

    /// The earliest deadline of any armed timer: when the driver must next
    /// wake the core.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.values().min().copied()
    }

    /// Disarms and returns the due timer (deadline `<= now`) with the
    /// earliest deadline, the smallest key among equal deadlines; `None` if
    /// nothing is due.
    pub fn pop_expired(&mut self, now: Instant) -> Option<K> {
        let (k, _) = self
            .deadlines
            .iter()
            .filter(|(_, at)| **at <= now)
            .min_by_key(|(k, at)| (**at, **k))
            .map(|(k, at)| (*k, *at))?;
        self.deadlines.remove(&k);
        Some(k)
    }

    /// Disarms and returns every due timer, in the order
    /// [`pop_expired`](Self::pop_expired) would yield them.
    pub fn expired(&mut self, now: Instant) -> Vec<K> {
        let mut due: Vec<(Instant, K)> =
            self.deadlines.iter().filter(|(_, at)| **at <= now).map(|(k, at)| (*at, *k)).collect();
        due.sort_unstable();
        for (_, k) in &due {
            self.deadlines.remove(k);
        }
        due.into_iter().map(|(_, k)| k).collect()
    }

    /// Armed timers and their deadlines, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (K, Instant)> + '_ {
        self.deadlines.iter().map(|(k, at)| (*k, *at))
    }

    /// Disarms every timer.
    pub fn clear(&mut self) {
        self.deadlines.clear();
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    enum T {
        Heartbeat,
        Election,
        Probe(u32),
    }

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    #[test]
    fn empty_table() {
        let mut t: TimerTable<T> = TimerTable::new();
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
        assert_eq!(t.next_deadline(), None);
        assert_eq!(t.pop_expired(ms(1_000_000)), None);
        assert_eq!(t.expired(ms(1_000_000)), Vec::<T>::new());
        assert_eq!(t, TimerTable::default());
    }

    #[test]
    fn set_get_rearm_cancel() {
        let mut t = TimerTable::new();
        t.set(T::Heartbeat, ms(10));
        assert!(t.is_armed(T::Heartbeat));
        assert!(!t.is_armed(T::Election));
        assert_eq!(t.get(T::Heartbeat), Some(ms(10)));
        assert_eq!(t.get(T::Election), None);
        // Re-arming replaces, later or earlier.
        t.set(T::Heartbeat, ms(30));
        assert_eq!(t.get(T::Heartbeat), Some(ms(30)));
        t.set(T::Heartbeat, ms(5));
        assert_eq!(t.get(T::Heartbeat), Some(ms(5)));
        assert_eq!(t.len(), 1);
        t.cancel(T::Heartbeat);
        assert!(!t.is_armed(T::Heartbeat));
        assert!(t.is_empty());
        // Cancelling what is not armed is a no-op.
        t.cancel(T::Election);
        assert!(t.is_empty());
    }

    #[test]
    fn keys_with_data_are_distinct_timers() {
        let mut t = TimerTable::new();
        t.set(T::Probe(1), ms(10));
        t.set(T::Probe(2), ms(20));
        assert_eq!(t.len(), 2);
        t.cancel(T::Probe(1));
        assert_eq!(t.get(T::Probe(1)), None);
        assert_eq!(t.get(T::Probe(2)), Some(ms(20)));
    }

    #[test]
    fn next_deadline_is_the_minimum() {
        let mut t = TimerTable::new();
        t.set(T::Election, ms(300));
        t.set(T::Heartbeat, ms(100));
        t.set(T::Probe(7), ms(200));
        assert_eq!(t.next_deadline(), Some(ms(100)));
        t.cancel(T::Heartbeat);
        assert_eq!(t.next_deadline(), Some(ms(200)));
    }

    #[test]
    fn pop_expired_by_deadline_then_key() {
        let mut t = TimerTable::new();
        t.set(T::Probe(3), ms(50));
        t.set(T::Election, ms(50));
        t.set(T::Heartbeat, ms(60));
        t.set(T::Probe(1), ms(40));
        t.set(T::Probe(9), ms(70));
        assert_eq!(t.pop_expired(ms(39)), None);
        // A deadline equal to now is due.
        assert_eq!(t.pop_expired(ms(60)), Some(T::Probe(1)));
        assert_eq!(t.pop_expired(ms(60)), Some(T::Election));
        assert_eq!(t.pop_expired(ms(60)), Some(T::Probe(3)));
        assert_eq!(t.pop_expired(ms(60)), Some(T::Heartbeat));
        assert_eq!(t.pop_expired(ms(60)), None);
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(T::Probe(9)), Some(ms(70)));
    }

    #[test]
    fn expired_drains_all_due_in_order() {
        let mut t = TimerTable::new();
        t.set(T::Probe(2), ms(20));
        t.set(T::Heartbeat, ms(20));
        t.set(T::Election, ms(10));
        t.set(T::Probe(1), ms(21));
        assert_eq!(t.expired(ms(20)), vec![T::Election, T::Heartbeat, T::Probe(2)]);
        assert_eq!(t.expired(ms(20)), Vec::<T>::new());
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(T::Probe(1), ms(21))]);
    }

    #[test]
    fn clear_and_equality() {
        let mut a = TimerTable::new();
        let mut b = TimerTable::new();
        a.set(T::Heartbeat, ms(1));
        a.set(T::Election, ms(2));
        b.set(T::Election, ms(2));
        b.set(T::Heartbeat, ms(1));
        assert_eq!(a, b, "insertion order does not matter");
        a.clear();
        assert!(a.is_empty());
        assert_eq!(a.next_deadline(), None);
    }

    proptest! {
        #[test]
        fn pop_expired_is_ordered_and_never_early(
            timers in proptest::collection::vec((0u32..16, 0u64..1_000), 0..40),
            now in 0u64..1_200,
        ) {
            let mut t = TimerTable::new();
            for (k, at) in &timers {
                t.set(*k, Instant::from_micros(*at));
            }
            let reference = t.clone();
            let now = Instant::from_micros(now);
            let mut popped = Vec::new();
            while let Some(k) = t.pop_expired(now) {
                let at = reference.get(k).unwrap();
                prop_assert!(at <= now);
                prop_assert!(!t.is_armed(k));
                popped.push((at, k));
            }
            prop_assert!(popped.windows(2).all(|w| w[0] < w[1]));
            // Whatever remains is not yet due, and nothing was lost.
            prop_assert!(t.iter().all(|(_, at)| at > now));
            prop_assert_eq!(popped.len() + t.len(), reference.len());
            // `expired` agrees with repeated `pop_expired`.
            let mut again = reference.clone();
            prop_assert_eq!(again.expired(now), popped.iter().map(|(_, k)| *k).collect::<Vec<_>>());
            prop_assert_eq!(again, t);
        }
    }
}
