//! The arithmetic of one key's lease: a grant applied, the next `k`, the decision reported,
//! the clean-up of expired entries.

use std::time::Duration;

use super::{Held, Map, Refill};
use crate::{Decision, LeaseGrant, Limit};

/// A grant applied to `h`, then the cost's rest (`refill.need`, beside the units it set
/// aside) spent from it; `None` when refused.
pub(super) fn apply(
    h: &mut Held,
    refill: &Refill,
    grant: &LeaseGrant,
    sent: u64,
) -> Option<Decision> {
    let cap = match h.limit.lease_mode() {
        Some(lease) => duration_us(lease.lease_ttl()),
        None => 0,
    };
    let window_rest = duration_us(grant.valid_for);
    let valid = window_rest.min(cap);
    h.store_left = grant.remaining;
    h.window_end = sent.saturating_add(window_rest);
    if grant.granted < refill.need || grant.granted == 0 {
        let dry = grant.retry_after.map_or(valid, duration_us).min(cap);
        h.dry_until = sent.saturating_add(dry);
        return None;
    }
    // Units still held from before end with the newest grant (they are of the same window
    // unless clocks drifted, and the newest end is the best known).
    h.window = grant.window;
    h.until = sent.saturating_add(valid);
    h.units += grant.granted;
    h.gauge.increment(grant.granted as f64);
    h.dry_until = 0;
    // `granted >= need`, so the units are there.
    h.spend(refill.need);
    let limit = h.limit.clone();
    Some(allowed(&limit, h, sent))
}

/// Drops expired entries, their units lost to their window (the memory bound).
pub(super) fn clean(map: &mut Map, now: u64) {
    map.held.retain(|_, h| {
        let keep = h.taking || now < h.until.max(h.dry_until);
        if !keep {
            h.gauge.decrement(h.units as f64);
        }
        keep
    });
    map.cleaned_at_len = map.held.len();
}

/// `k` for the next take: from the rate observed since the last take, restarting the count.
pub(super) fn rate_units(lease: &crate::Lease, limit: &Limit, h: &mut Held, now: u64) -> u64 {
    let elapsed = now.saturating_sub(h.rate_since);
    let rate = if elapsed == 0 || h.rate_spent == 0 {
        // No history (a new key) or nothing spent: the smallest lease.
        0.0
    } else {
        h.rate_spent as f64 * 1e6 / elapsed as f64
    };
    h.rate_since = now;
    h.rate_spent = 0;
    lease.units_for(limit.quota().limit(), rate)
}

/// An admission from `h`'s lease: `reset_after` is the time to the end of the store's
/// window (when the quota is back), not to the end of the lease, which only says how long
/// this instance may hand its units out.
pub(super) fn allowed(limit: &Limit, h: &Held, now: u64) -> Decision {
    Decision::allowed(
        limit.quota().limit(),
        h.units + h.store_left,
        Duration::from_micros(h.window_end.saturating_sub(now)),
    )
}

pub(super) fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
