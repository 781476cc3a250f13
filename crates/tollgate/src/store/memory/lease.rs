//! The memory store's side of the lease tier: one fixed-window take (and give-back) under
//! the key's shard lock, the twin of `tollgate-redis`'s `lua/lease.lua`.
//!
//! It exists so that the lease tier runs, and is tested with a fake clock, without Redis;
//! in one process a lease saves nothing (the memory store decides as fast as the tier).

use std::time::Duration;

use super::shard::Slot;
use super::{At, Inner, NoRoom, lock, shard_of};
use crate::rules::{AnyState, FixedWindowState};
use crate::{LeaseGrant, LeaseTake};

impl Inner {
    /// Gives back, then takes, at `at`: see [`crate::Store::take_lease`].
    pub(super) fn take_lease(&self, take: &LeaseTake<'_>, at: At) -> Result<LeaseGrant, NoRoom> {
        let now = at.us;
        let quota = take.limit.quota();
        let (limit, period) = (quota.limit(), quota.period_micros());
        let current = now - now % period;
        let mut shard = lock(&self.shards[shard_of(take.key)]);
        at.note(&mut shard);
        let (window, count) = match shard.map.get(take.key).map(|s| &s.state) {
            Some(AnyState::FixedWindow(s)) => (s.window, s.count),
            _ => (0, 0),
        };
        let mut live = if now.saturating_sub(window) < period {
            count
        } else {
            0
        };
        let gave_back = take.give_back > 0 && live > 0 && take.give_back_window == window;
        if gave_back {
            live -= take.give_back.min(live);
        }
        let available = limit.saturating_sub(live);
        let granted = if available < take.need {
            0
        } else {
            take.want.min(available)
        };
        live += granted;
        let end = current.saturating_add(period);
        let valid_for = end - now;
        // As lease.lua: a grant counts in now's window and lives until it ends; a give-back
        // alone keeps the key's window and expiry; a refusal writes nothing. (Rewriting the
        // window on a refusal would restart a count that a caller whose clock went back
        // still sees live.)
        if granted > 0 {
            let state = AnyState::FixedWindow(FixedWindowState {
                window: current,
                count: live,
            });
            if let Some(slot) = shard.map.get_mut(take.key) {
                slot.state = state;
                slot.replenished_at = end;
            } else {
                if !self.reserve(1) {
                    self.at_cap(&mut shard, take.limit, now, |_| false)?;
                }
                shard.insert(
                    take.key,
                    Slot {
                        state,
                        replenished_at: end,
                    },
                );
            }
        } else if gave_back && let Some(slot) = shard.map.get_mut(take.key) {
            slot.state = AnyState::FixedWindow(FixedWindowState {
                window,
                count: live,
            });
        }
        drop(shard);
        let refused = granted < take.need || (take.need > 0 && granted == 0);
        Ok(LeaseGrant {
            granted,
            window: current,
            valid_for: Duration::from_micros(valid_for),
            remaining: limit.saturating_sub(live),
            retry_after: refused.then(|| Duration::from_micros(valid_for)),
        })
    }
}
