//! The memory store's pacing calls: a reservation, its cancellation or a settlement on one
//! key, under the key's shard lock, running the rule's own arithmetic
//! ([`crate::rules::AnyRule::pace`]): the twin of the Redis scripts' pacing ops.

use super::shard::Slot;
use super::{At, Inner, NoRoom, lock, shard_of};
use crate::{Entry, Pace, Paced, StoreError};

impl Inner {
    /// Runs `pace` on `entry`'s key at `at`. A key the store does not hold is created
    /// only when the call changed its state (a reservation taken, a charge), so a refused
    /// reservation or a refund of an unknown key stores nothing.
    pub(super) fn pace(&self, entry: &Entry<'_>, pace: Pace, at: At) -> Result<Paced, StoreError> {
        let now = at.us;
        let rule = entry.limit.rule();
        let cannot = || {
            StoreError::Protocol(format!(
                "limit {:?} cannot hand out slots: only gcra and token_bucket can",
                entry.limit.name()
            ))
        };
        let mut shard = lock(&self.shards[shard_of(&entry.key)]);
        at.note(&mut shard);
        if let Some(slot) = shard.map.get_mut(&entry.key) {
            let paced = rule
                .pace(&mut slot.state, now, entry.cost, pace)
                .ok_or_else(cannot)?;
            slot.replenished_at = now.saturating_add(micros(&paced));
            return Ok(paced);
        }
        let fresh = rule.empty_state();
        let mut state = fresh.clone();
        let paced = rule
            .pace(&mut state, now, entry.cost, pace)
            .ok_or_else(cannot)?;
        if state == fresh {
            return Ok(paced);
        }
        if !self.reserve(1) {
            self.at_cap(&mut shard, entry.limit, now, |_| false)
                .map_err(|NoRoom| self.full())?;
        }
        let replenished_at = now.saturating_add(micros(&paced));
        shard.insert(
            &entry.key,
            Slot {
                state,
                replenished_at,
            },
        );
        Ok(paced)
    }
}

/// Until the key is back to a full quota, in µs.
fn micros(paced: &Paced) -> u64 {
    u64::try_from(paced.decision.reset_after.as_micros()).unwrap_or(u64::MAX)
}
