//! [`Locked`]: the shards of one request's keys, locked together in ascending order, so that
//! a request of several keys is one step to every other caller and two such requests never
//! deadlock.

use std::sync::{Mutex, MutexGuard};

use smallvec::SmallVec;

use super::shard::Shard;

/// The shard guards a request holds while it is decided.
pub(super) struct Locked<'a> {
    /// Shard index and its guard, ascending by index.
    guards: SmallVec<[(usize, MutexGuard<'a, Shard>); 2]>,
}

impl<'a> Locked<'a> {
    /// Locks the shards `ids` (in any order, repeats allowed), ascending; `shard(i)` is shard
    /// `i`'s mutex.
    pub(super) fn new(
        shard: impl Fn(usize) -> &'a Mutex<Shard>,
        ids: impl IntoIterator<Item = usize>,
    ) -> Self {
        let mut order: SmallVec<[usize; 2]> = ids.into_iter().collect();
        order.sort_unstable();
        order.dedup();
        Locked {
            guards: order.iter().map(|&i| (i, super::lock(shard(i)))).collect(),
        }
    }

    /// Shard `id`, which must be one of the locked ones.
    pub(super) fn shard(&mut self, id: usize) -> &mut Shard {
        let Some((_, shard)) = self.guards.iter_mut().find(|(i, _)| *i == id) else {
            unreachable!("every entry's shard is locked")
        };
        shard
    }
}
