//! A churning table's tombstones, counted exactly, and cleared before they make it grow.
//!
//! A key removed from a hash map can leave a tombstone, which takes room from new keys until
//! the table is rebuilt. A table whose keys come and go (a sweep removes what an hour of new
//! keys added) runs out of room while little more than half full, and the map then doubles
//! rather than clean up in place: on ten million keys over ten hours every table doubled,
//! 0.67 GB where its keys need 0.30 GB.
//!
//! The map does not say how many tombstones it holds, but its `capacity()` does count them:
//! it is keys plus the room left, and only a tombstone takes room without holding a key. So
//! the tombstones are the capacity the table had when it was last built (grown, rebuilt or
//! shrunk: no tombstones then) less its capacity now. Here nothing is removed between sweeps,
//! so a table that grew since the last sweep has no tombstones yet, and its capacity at the
//! next sweep's start is its new full one. A table is rebuilt, at the same size, only when
//! its tombstones outweigh its room; a table that is merely well filled grows when it must,
//! as any map does, and never early.

use std::collections::HashMap;

use crate::key_count::BuildPrehashed;

/// One table of keys by their hash.
pub(super) type Table<V> = HashMap<u64, V, BuildPrehashed>;

/// What a table's capacity was when it was last built, with no tombstones.
#[derive(Debug, Default)]
pub(super) struct Tombstones {
    full: usize,
}

impl Tombstones {
    /// Removes the keys `keep` refuses, then gives `table` back the room their tombstones
    /// took when they outweigh it, and shrinks a table much larger than its keys (after a
    /// busy hour). Tables are small (a 64th of the keys), so the copy of one never holds
    /// much at once.
    pub(super) fn sweep<V>(
        &mut self,
        table: &mut Table<V>,
        keep: impl FnMut(&u64, &mut V) -> bool,
    ) {
        self.full = self.full.max(table.capacity());
        table.retain(keep);
        let (len, capacity) = (table.len(), table.capacity());
        if capacity > 4 * len + 1_024 {
            table.shrink_to_fit();
        } else if self.count(table) > ((capacity - len) / 2).max(len / 8).max(256) {
            let mut fresh = Table::with_capacity_and_hasher(self.full, BuildPrehashed::default());
            fresh.extend(table.drain());
            *table = fresh;
        } else {
            return;
        }
        self.full = table.capacity();
    }

    /// How many tombstones `table` holds (the one this tracks, after a sweep).
    fn count<V>(&self, table: &Table<V>) -> usize {
        self.full.saturating_sub(table.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_count::hash_parts;

    fn key(i: u64) -> u64 {
        hash_parts([format!("u{i}").as_str()])
    }

    /// Keys that come and go (a fifth of them replaced between sweeps, for 200 sweeps) keep
    /// a table at the size it had: without the rebuild it doubles (the removals' tombstones
    /// leave no room, and the map grows rather than clean up). The keys are hashed as the
    /// replay hashes them: a regular sequence of hashes frees slots too evenly to leave
    /// tombstones.
    #[test]
    fn churn_does_not_grow_a_table() {
        let run = |compacting: bool| {
            let mut table: Table<u64> = Table::default();
            let mut tombstones = Tombstones::default();
            for i in 0..20_000 {
                table.insert(key(i), i);
            }
            let fresh = table.capacity();
            let mut next = 20_000_u64;
            let mut largest = fresh;
            for _ in 0..200 {
                let oldest = next - 20_000 + 4_000;
                if compacting {
                    tombstones.sweep(&mut table, |_, v| *v >= oldest);
                } else {
                    table.retain(|_, v| *v >= oldest);
                }
                for _ in 0..4_000 {
                    table.insert(key(next), next);
                    next += 1;
                }
                largest = largest.max(table.capacity());
            }
            assert_eq!(table.len(), 20_000);
            (fresh, largest)
        };
        let (fresh, largest) = run(true);
        assert!(largest <= fresh, "{largest} > {fresh}");
        let (fresh, largest) = run(false);
        assert!(
            largest > fresh,
            "without the rebuild the table grows: {largest}"
        );
    }

    /// Fills a fresh table with at least 2,000 keys (from 0 on) until less than 1/`share`
    /// of its room is left; returns it, its capacity and the next key.
    fn filled(share: usize) -> (Table<u64>, usize, u64) {
        let mut table: Table<u64> = Table::default();
        let mut i = 0;
        while table.len() < 2_000 || share * (table.capacity() - table.len()) >= table.capacity() {
            table.insert(key(i), i);
            i += 1;
        }
        let capacity = table.capacity();
        (table, capacity, i)
    }

    /// A well-filled table (under a tenth of its room left) that a sweep leaves with few tombstones keeps its size, however
    /// little room is left: it grows when a key needs the room, not ahead of it. (Rebuilding
    /// at "room below a quarter of the keys", as before, doubled it here.)
    #[test]
    fn a_well_filled_table_is_not_grown_by_a_sweep() {
        let (mut table, capacity, next) = filled(10);
        let mut tombstones = Tombstones::default();
        tombstones.sweep(&mut table, |_, v| *v >= 10);
        assert_eq!(table.len() as u64, next - 10);
        assert!(tombstones.count(&table) <= 10);
        assert!(
            table.capacity() <= capacity,
            "{} > {capacity}",
            table.capacity()
        );
    }

    /// In a table with a fifth of its room left, keys that come and go without a rebuild
    /// leave tombstones, which are counted; once they outweigh the room, a sweep rebuilds
    /// the table with all its room back, at the same size.
    #[test]
    fn a_table_short_of_room_by_tombstones_is_rebuilt_at_its_size() {
        let (mut table, capacity, mut next) = filled(5);
        let mut tombstones = Tombstones { full: capacity };
        let outweigh = |table: &Table<u64>, tombstones: &Tombstones| {
            let (len, room) = (table.len(), table.capacity() - table.len());
            tombstones.count(table) > (room / 2).max(len / 8).max(256)
        };
        let mut oldest = 0;
        while !outweigh(&table, &tombstones) {
            assert!(oldest < 100_000, "no tombstones left by {oldest} removals");
            oldest += 100;
            table.retain(|_, v| *v >= oldest);
            for _ in 0..100 {
                table.insert(key(next), next);
                next += 1;
            }
        }
        assert!(table.capacity() < capacity, "tombstones took room");
        tombstones.sweep(&mut table, |_, _| true);
        assert_eq!(table.capacity(), capacity, "rebuilt at its size");
        assert_eq!(tombstones.count(&table), 0);
    }

    /// A table that grew between sweeps is measured at its new size: growing leaves no
    /// tombstones, so its capacity before the sweep is its full one.
    #[test]
    fn growth_between_sweeps_is_seen() {
        let mut table: Table<u64> = Table::default();
        let mut tombstones = Tombstones::default();
        tombstones.sweep(&mut table, |_, _| true);
        for i in 0..10_000 {
            table.insert(key(i), i);
        }
        let grown = table.capacity();
        tombstones.sweep(&mut table, |_, _| true);
        assert_eq!(tombstones.full, grown);
        assert_eq!(tombstones.count(&table), 0);
    }
}
