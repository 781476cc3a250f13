//! One space-saving sketch (Metwally et al.) of at most [`TOP_CAPACITY`] counters, built for
//! the refusal path: adding a key allocates nothing once the sketch has filled, and costs
//! O(log capacity), a new key in a full sketch included (the attack case: a flood of distinct
//! refused keys).
//!
//! - The counters sit in fixed slots (`counters`), found by key through a small open-addressed
//!   table of slot numbers (`table`, linear probing, backward-shift deletion), probed with the
//!   key's own hash ([`Key::prehash`]): no hashing, no allocation.
//! - A binary min-heap of counts with their slots (`count`, `slot`, and each slot's place in
//!   it, `at`) keeps the smallest counter at the root: the one a new key replaces, and the
//!   sketch's floor. A count only grows, so a counter only moves down.

use crate::Key;

use super::TOP_CAPACITY;

/// Buckets of the slot table: twice the counters, so that probes stay short.
const TABLE: usize = 2 * TOP_CAPACITY;

// Slots are `u8`s, and the table's size a power of two.
const _: () = assert!(TOP_CAPACITY < 256 && TABLE.is_power_of_two());

/// One counter's key and what it inherited when it took its slot (the most its count may
/// overstate); its count is kept in the heap.
#[derive(Debug, Clone)]
struct Counter {
    key: Key,
    error: u64,
}

/// A space-saving sketch of at most [`TOP_CAPACITY`] counters.
#[derive(Debug, Clone)]
pub(super) struct Sketch {
    /// Slot → key and error; grows to [`TOP_CAPACITY`] once, then slots are reused.
    counters: Vec<Counter>,
    /// Bucket → slot + 1 (`0`: empty).
    table: [u8; TABLE],
    /// Slot → its bucket in `table`.
    bucket: [u8; TOP_CAPACITY],
    /// A min-heap by count (its first `counters.len()` places are used): each place's count,
    /// and its slot.
    count: [u64; TOP_CAPACITY],
    slot: [u8; TOP_CAPACITY],
    /// Slot → its place in the heap.
    at: [u8; TOP_CAPACITY],
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch {
            counters: Vec::new(),
            table: [0; TABLE],
            bucket: [0; TOP_CAPACITY],
            count: [0; TOP_CAPACITY],
            slot: [0; TOP_CAPACITY],
            at: [0; TOP_CAPACITY],
        }
    }
}

impl Sketch {
    /// Counts one occurrence of `key`.
    pub(super) fn add(&mut self, key: &Key) {
        let bucket = match self.probe(key) {
            Ok(slot) => {
                let place = usize::from(self.at[slot]);
                self.count[place] += 1;
                self.sift_down(place);
                return;
            }
            Err(bucket) => bucket,
        };
        let len = self.counters.len();
        if len < TOP_CAPACITY {
            if self.counters.capacity() == 0 {
                self.counters.reserve_exact(TOP_CAPACITY);
            }
            self.counters.push(Counter {
                key: key.clone(),
                error: 0,
            });
            self.table[bucket] = byte(len + 1);
            self.bucket[len] = byte(bucket);
            self.count[len] = 1;
            self.slot[len] = byte(len);
            self.at[len] = byte(len);
            self.sift_up(len);
            return;
        }
        // Full: the smallest counter (the heap's root) goes, and the new key inherits its
        // count as its error.
        let slot = usize::from(self.slot[0]);
        self.unlink(usize::from(self.bucket[slot]));
        // The unlinking may have moved the run the new key's probe went through.
        let Err(bucket) = self.probe(key) else {
            unreachable!("the key was absent and nothing added it");
        };
        let min = self.count[0];
        self.counters[slot] = Counter {
            key: key.clone(),
            error: min,
        };
        self.table[bucket] = byte(slot + 1);
        self.bucket[slot] = byte(bucket);
        self.count[0] = min + 1;
        self.sift_down(0);
    }

    /// The smallest count held when full (the most an absent key may have had), else 0.
    pub(super) fn floor(&self) -> u64 {
        if self.counters.len() < TOP_CAPACITY {
            return 0;
        }
        self.count[0]
    }

    /// Counters held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.counters.len()
    }

    /// `(key, count, error)` of each counter, in no particular order.
    pub(super) fn entries(&self) -> impl Iterator<Item = (&Key, u64, u64)> {
        self.counters
            .iter()
            .zip(&self.at)
            .map(|(c, &place)| (&c.key, self.count[usize::from(place)], c.error))
    }

    /// Forgets every key, keeping the memory.
    pub(super) fn clear(&mut self) {
        self.counters.clear();
        self.table = [0; TABLE];
    }

    /// The slot holding `key`, or the empty bucket where it would go.
    fn probe(&self, key: &Key) -> Result<usize, usize> {
        let mask = TABLE - 1;
        let mut bucket = first_bucket(key);
        loop {
            match self.table[bucket] {
                0 => return Err(bucket),
                s => {
                    let slot = usize::from(s) - 1;
                    if self.counters[slot].key == *key {
                        return Ok(slot);
                    }
                }
            }
            bucket = (bucket + 1) & mask;
        }
    }

    /// Empties `hole`, moving later buckets of the same run back so that every key stays
    /// reachable from its first bucket.
    fn unlink(&mut self, mut hole: usize) {
        let mask = TABLE - 1;
        let mut next = (hole + 1) & mask;
        loop {
            let s = self.table[next];
            if s == 0 {
                break;
            }
            let slot = usize::from(s) - 1;
            let home = first_bucket(&self.counters[slot].key);
            // The entry at `next` may fill the hole unless its first bucket is cyclically
            // within (hole, next].
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                self.table[hole] = s;
                self.bucket[slot] = byte(hole);
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.table[hole] = 0;
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.count.swap(a, b);
        self.slot.swap(a, b);
        self.at[usize::from(self.slot[a])] = byte(a);
        self.at[usize::from(self.slot[b])] = byte(b);
    }

    fn sift_up(&mut self, mut place: usize) {
        while place > 0 {
            let parent = (place - 1) / 2;
            if self.count[parent] <= self.count[place] {
                break;
            }
            self.swap(parent, place);
            place = parent;
        }
    }

    fn sift_down(&mut self, mut place: usize) {
        let len = self.counters.len();
        loop {
            let left = 2 * place + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.count[right] < self.count[left] {
                right
            } else {
                left
            };
            if self.count[place] <= self.count[child] {
                break;
            }
            self.swap(place, child);
            place = child;
        }
    }
}

/// The bucket where `key`'s probe starts: the low bits of its hash.
fn first_bucket(key: &Key) -> usize {
    // Truncation intended: only the low bits are kept.
    #[allow(clippy::cast_possible_truncation)]
    let low = key.prehash() as usize;
    low & (TABLE - 1)
}

/// `n` (< 256, asserted above) as a byte.
fn byte(n: usize) -> u8 {
    u8::try_from(n).unwrap_or_else(|_| unreachable!("slots, places and buckets are below 256"))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::{Algorithm, Limit, Namespace, Quota};

    fn key(user: u32) -> Key {
        let limit =
            Limit::new("t", Algorithm::Gcra, Quota::per_second(1).expect("valid")).expect("valid");
        Key::new(&Namespace::default(), &limit, &[("user", user.to_string())])
    }

    /// What a sketch must always be: a heap by count, a table that finds every counter, at
    /// most the capacity.
    fn assert_consistent(s: &Sketch) {
        let len = s.len();
        assert!(len <= TOP_CAPACITY);
        for place in 1..len {
            assert!(s.count[(place - 1) / 2] <= s.count[place], "heap order");
        }
        for slot in 0..len {
            assert_eq!(usize::from(s.slot[usize::from(s.at[slot])]), slot);
            assert_eq!(
                s.probe(&s.counters[slot].key),
                Ok(slot),
                "counter {slot} found"
            );
            assert_eq!(usize::from(s.table[usize::from(s.bucket[slot])]), slot + 1);
        }
        assert_eq!(s.table.iter().filter(|&&b| b != 0).count(), len);
    }

    proptest! {
        /// Against exact counts, for any stream: each held count is within its error of the
        /// truth (true count in [count − error, count]), every key refused more than
        /// n / capacity times is held, the floor is at most n / capacity, and the structure
        /// stays consistent.
        #[test]
        fn space_saving_bounds(stream in proptest::collection::vec(0u32..300, 0..3_000)) {
            let keys: Vec<Key> = (0..300).map(key).collect();
            let mut s = Sketch::default();
            let mut exact: HashMap<u32, u64> = HashMap::new();
            for &k in &stream {
                s.add(&keys[k as usize]);
                *exact.entry(k).or_default() += 1;
            }
            assert_consistent(&s);
            let n = stream.len() as u64;
            prop_assert!(s.floor() * TOP_CAPACITY as u64 <= n);
            for (key, count, error) in s.entries() {
                let i = keys.iter().position(|k| k == key).expect("a known key");
                let truth = exact.get(&(i as u32)).copied().unwrap_or(0);
                prop_assert!(count >= truth && count - error <= truth);
            }
            for (k, &truth) in &exact {
                if truth * TOP_CAPACITY as u64 > n {
                    prop_assert!(s.entries().any(|(key, ..)| *key == keys[*k as usize]));
                }
            }
        }
    }

    /// Clearing keeps the memory and forgets every key.
    #[test]
    fn clear_forgets() {
        let mut s = Sketch::default();
        for i in 0..200 {
            s.add(&key(i));
        }
        assert_eq!(s.len(), TOP_CAPACITY);
        s.clear();
        assert_consistent(&s);
        assert_eq!((s.len(), s.floor()), (0, 0));
        assert_eq!(s.counters.capacity(), TOP_CAPACITY);
        s.add(&key(7));
        assert_eq!(
            s.entries().map(|(_, count, _)| count).collect::<Vec<_>>(),
            [1]
        );
    }
}
