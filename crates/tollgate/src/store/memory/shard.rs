//! One shard of the memory store: the keys' states, and the same keys by when they replenish.
//!
//! The heap exists for the key cap: a new key at the cap takes the place of the key that
//! replenishes soonest, found in O(log n) instead of a sweep. It is kept lazily so that the hot
//! path, charging a known key, never touches it: an entry may be out of date (its key charged
//! since, reset, or pushed twice), and is brought up to date only when it reaches the top.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};

use smallvec::SmallVec;

use crate::Key;
use crate::limit::key::BuildKeyHasher;
use crate::rules::AnyState;

/// One shard: the keys' states, and the same keys ordered by when they replenish.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) map: HashMap<Key, Slot, BuildKeyHasher>,
    /// Every held key at least once, at the `replenished_at` its slot had when it was pushed
    /// or last moved (usually earlier than the slot's now: charging moves it later). Entries of
    /// reset keys and duplicates stay until they reach the top, or until [`Shard::insert`]
    /// rebuilds the heap.
    by_replenish: BinaryHeap<Due>,
    /// The map's capacity when it was last built (grown or rebuilt: no tombstones then); see
    /// [`Shard::compact`].
    full: usize,
    /// The time (µs) of the last decision in this shard whose caller gave its own time,
    /// `None` while every decision took the store clock's: the background sweep goes no
    /// further (`super::Sweep::UpToCallers`).
    pub(super) caller_now: Option<u64>,
}

/// A heap entry: 32 bytes, the key shared with the map (an `Arc` clone).
struct Due {
    at: u64,
    key: Key,
}

/// Reversed: [`BinaryHeap`] is a max-heap, the soonest must be on top.
impl Ord for Due {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.at.cmp(&self.at)
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

/// What a new key at the cap did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AtCap {
    /// Took the place of a replenished key: nothing lost.
    Replenished,
    /// Took the place of a charged key, which starts again from a full quota.
    Evicted,
    /// No key of its shard could make room: [`StoreError::Full`].
    Refused,
}

impl AtCap {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            AtCap::Replenished => "replenished",
            AtCap::Evicted => "evicted",
            AtCap::Refused => "refused",
        }
    }
}

impl Shard {
    /// Holds `key` (not held yet) with `slot`.
    pub(super) fn insert(&mut self, key: &Key, slot: Slot) {
        // Out-of-date entries only grow by reset keys coming back: rebuild now and then, so the
        // heap stays within twice the map, amortized O(1) per insert.
        if self.by_replenish.len() >= 2 * self.map.len() + 64 {
            self.by_replenish = self
                .map
                .iter()
                .map(|(key, slot)| Due {
                    at: slot.replenished_at,
                    key: key.clone(),
                })
                .collect();
        }
        self.by_replenish.push(Due {
            at: slot.replenished_at,
            key: key.clone(),
        });
        self.map.insert(key.clone(), slot);
        // Only an insert grows the map, and a map just grown holds no tombstones.
        self.full = self.full.max(self.map.capacity());
    }

    /// The soonest `replenished_at` of a held key, after bringing the heap's top up to date:
    /// entries of keys no longer held are dropped, entries of keys charged since move down.
    pub(super) fn soonest(&mut self) -> Option<u64> {
        loop {
            let mut top = self.by_replenish.peek_mut()?;
            #[cfg(test)]
            super::tests::visited(1);
            match self.map.get(&top.key) {
                Some(slot) if slot.replenished_at == top.at => return Some(top.at),
                // Charged since it was pushed (or, with a clock that went back, earlier): moved
                // to the slot's time when the guard drops. A duplicate (a reset key held again)
                // moves too, and is dropped once the other entry has evicted or swept the key.
                Some(slot) => top.at = slot.replenished_at,
                // No longer held.
                None => drop(std::collections::binary_heap::PeekMut::pop(top)),
            }
        }
    }

    /// Removes the held key that replenishes soonest, other than those `keep` names (the
    /// other keys of the check being decided); `None` when there is none.
    pub(super) fn evict_soonest(&mut self, now: u64, keep: impl Fn(&Key) -> bool) -> Option<AtCap> {
        let mut kept: SmallVec<[Due; 2]> = SmallVec::new();
        let evicted = loop {
            let Some(at) = self.soonest() else { break None };
            let Some(due) = self.by_replenish.pop() else {
                break None;
            };
            if keep(&due.key) {
                kept.push(due);
                continue;
            }
            self.map.remove(&due.key);
            break Some(if at <= now {
                AtCap::Replenished
            } else {
                AtCap::Evicted
            });
        };
        self.by_replenish.extend(kept);
        evicted
    }

    /// Heap entries, out-of-date ones included.
    #[cfg(test)]
    pub(super) fn heap_len(&self) -> usize {
        self.by_replenish.len()
    }

    /// Drops every key replenished at `now`; returns how many. Visits only those keys (and
    /// out-of-date heap entries), not the whole shard.
    pub(super) fn sweep(&mut self, now: u64) -> usize {
        let mut removed = 0;
        while self.soonest().is_some_and(|at| at <= now) {
            if let Some(due) = self.by_replenish.pop() {
                self.map.remove(&due.key);
                removed += 1;
            }
        }
        if removed > 0 {
            self.compact();
        }
        removed
    }

    /// Gives the map back the room removed keys' tombstones took, once they outweigh it. A
    /// removed key can leave a tombstone, which takes room from new keys until the map is
    /// rebuilt; a shard whose keys come and go runs out of room while little more than half
    /// full, and the map then doubles (on the decision path, inside an insert) rather than
    /// clean up in place. The map does not say how many tombstones it holds, but they are
    /// what its capacity (keys plus room) lost since it was last built: [`Shard::insert`]
    /// notes that capacity after each insert, the only place the map grows. So once the
    /// tombstones exceed half the room left (and an eighth of the keys, and 256: rebuilds
    /// stay amortized over the removals), the map is rebuilt here, on the sweeper, at the
    /// same size; a map that is merely well filled grows when a key needs the room, never
    /// early. (Measured in the replay's `--suggest`, whose tables churn the same way: 0.68
    /// GB, 0.39 GB rebuilt.) The rebuild holds the shard's lock as the doubling did: 0.4 ms
    /// for the 15,625 keys of a shard at the default cap (release build, 2026-12-06), now
    /// and then instead of once.
    fn compact(&mut self) {
        let (len, capacity) = (self.map.len(), self.map.capacity());
        if self.tombstones() > ((capacity - len) / 2).max(len / 8).max(256) {
            let mut fresh = HashMap::with_capacity_and_hasher(self.full, BuildKeyHasher::default());
            fresh.extend(self.map.drain());
            self.map = fresh;
            self.full = self.map.capacity();
        }
    }

    /// How many of the map's slots removed keys' tombstones hold.
    pub(super) fn tombstones(&self) -> usize {
        self.full.saturating_sub(self.map.capacity())
    }
}

/// A key's state.
pub(super) struct Slot {
    pub(super) state: AnyState,
    /// From this instant (µs) the state equals a fresh one and may be dropped.
    pub(super) replenished_at: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Limit, Namespace, Quota};

    /// Keys of a fixed-window limit told apart by a number, and fresh slots for them, to fill a
    /// shard directly.
    struct Numbered {
        limit: Limit,
        rule: crate::rules::AnyRule,
    }

    impl Numbered {
        fn new(name: &str) -> Numbered {
            let limit = Limit::new(
                name,
                Algorithm::FixedWindow,
                Quota::per_minute(10).expect("valid"),
            )
            .expect("valid");
            let rule = crate::rules::AnyRule::new(Algorithm::FixedWindow, limit.quota());
            Numbered { limit, rule }
        }

        fn key(&self, i: u64) -> Key {
            Key::new(
                &Namespace::default(),
                &self.limit,
                &[("user", i.to_string().as_str())],
            )
        }

        /// A fresh state, replenished at `at`.
        fn slot(&self, at: u64) -> Slot {
            Slot {
                state: self.rule.empty_state(),
                replenished_at: at,
            }
        }
    }

    /// Keys that come and go (a seventh of them swept and as many new ones, 300 times) keep a
    /// shard's map at the size it had. Without the sweep's rebuild it doubled after about 40
    /// rounds: removed keys leave tombstones, and the map grows rather than clean up in place.
    #[test]
    fn churn_does_not_grow_a_shard() {
        let numbered = Numbered::new("churn");
        let (key, slot) = (|i| numbered.key(i), |at| numbered.slot(at));
        let mut shard = Shard::default();
        let n = 20_000_u64;
        for i in 0..n {
            shard.insert(&key(i), slot(i));
        }
        let fresh = shard.map.capacity();
        let mut next = n;
        for round in 0..300 {
            assert_eq!(shard.sweep(next - n + 2_999), 3_000);
            for _ in 0..3_000 {
                shard.insert(&key(next), slot(next));
                next += 1;
            }
            assert_eq!(shard.map.len(), 20_000);
            assert!(
                shard.map.capacity() <= fresh,
                "round {round}: {} > {fresh}",
                shard.map.capacity()
            );
        }
    }

    /// A well-filled shard (under a tenth of its map's room left) that a sweep leaves with few
    /// tombstones keeps its map's size: it grows when a key needs the room, not ahead of it.
    /// (Rebuilding at "room below a quarter of the keys", as before, doubled it here.) In a
    /// shard with a fifth of its room left, keys that come and go leave tombstones, which are
    /// counted, and once they outweigh the room a sweep rebuilds the map with all its room
    /// back, at the same size.
    #[test]
    fn a_well_filled_shard_keeps_its_size_and_is_rebuilt_only_for_tombstones() {
        let numbered = Numbered::new("filled");
        let (key, slot) = (|i| numbered.key(i), |at| numbered.slot(at));
        // A shard of at least 2,000 keys (held from 0 on) with under 1/`share` of its room left;
        // with the next key.
        let filled = |share: usize| {
            let mut shard = Shard::default();
            let mut next = 0_u64;
            while shard.map.len() < 2_000
                || share * (shard.map.capacity() - shard.map.len()) >= shard.map.capacity()
            {
                shard.insert(&key(next), slot(next));
                next += 1;
            }
            (shard, next)
        };

        let (mut shard, _) = filled(10);
        let capacity = shard.map.capacity();
        assert_eq!(shard.sweep(9), 10);
        assert!(shard.tombstones() <= 10);
        assert!(
            shard.map.capacity() <= capacity,
            "{} > {capacity}",
            shard.map.capacity()
        );

        // Churn, 100 keys at a time, until the tombstones outweigh the room (as the sweep counts
        // them), then one more sweep.
        let (mut shard, mut next) = filled(5);
        let capacity = shard.map.capacity();
        let mut oldest = 0;
        loop {
            let (len, room) = (shard.map.len(), shard.map.capacity() - shard.map.len());
            if shard.tombstones() > (room / 2).max(len / 8).max(256) {
                break;
            }
            assert!(oldest < 100_000, "no tombstones left by {oldest} removals");
            oldest += 100;
            for at in oldest - 100..oldest {
                shard.map.remove(&key(at));
            }
            for _ in 0..100 {
                shard.insert(&key(next), slot(next));
                next += 1;
            }
        }
        assert!(shard.map.capacity() < capacity, "tombstones took room");
        assert_eq!(shard.sweep(oldest), 1);
        assert_eq!(shard.map.capacity(), capacity, "rebuilt at its size");
        assert_eq!(shard.tombstones(), 0);
    }
}
