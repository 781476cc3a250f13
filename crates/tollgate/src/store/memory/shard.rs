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
