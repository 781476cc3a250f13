//! [`Hits`]: the counts one descriptor adds to its rule's five series.

use tollgate::LimitDecision;

use super::names::RULE_SERIES;
use super::stat::Stat;

/// The counts one descriptor adds.
#[derive(Debug, Default)]
pub(crate) struct Hits {
    total: u64,
    within: u64,
    near: u64,
    over: u64,
    shadow: u64,
    /// Whether the descriptor was refused (its hits may be 0: check only).
    pub(crate) refused: bool,
}

impl Hits {
    /// A refusal of `cost` hits, counted as `shadow_mode` too when `own_shadow`.
    pub(crate) fn refused(cost: u64, own_shadow: bool) -> Hits {
        Hits {
            total: cost,
            over: cost,
            shadow: if own_shadow { cost } else { 0 },
            refused: true,
            ..Hits::default()
        }
    }

    /// A refusal of `cost` hits that took its count to `after` (refusals counted), split as
    /// the reference's `checkOverLimitThreshold` splits it: the hits past the limit are over
    /// (and `shadow_mode` when `own_shadow`, its `increaseShadowModeStats`), those between
    /// the near-limit threshold and the limit near, none within; all over when the count
    /// was at the limit already.
    pub(crate) fn crossing(
        limit: u64,
        after: u64,
        cost: u64,
        own_shadow: bool,
        near_ratio: f32,
    ) -> Hits {
        let before = after.saturating_sub(cost);
        if before >= limit || after <= limit {
            return Hits::refused(cost, own_shadow);
        }
        let over = after - limit;
        Hits {
            total: cost,
            near: limit - before.max(near_threshold(limit, near_ratio)),
            over,
            shadow: if own_shadow { over } else { 0 },
            refused: true,
            ..Hits::default()
        }
    }

    pub(crate) fn of(o: &LimitDecision, cost: u64, own_shadow: bool, near_ratio: f32) -> Hits {
        if !o.decision.is_allowed() {
            return Hits::refused(cost, own_shadow);
        }
        let limit = o.quota.limit();
        // Units in use after this hit, and before it.
        let after = limit.saturating_sub(o.decision.remaining);
        let before = after.saturating_sub(cost);
        let threshold = near_threshold(limit, near_ratio);
        let near = if after > threshold {
            after - before.max(threshold)
        } else {
            0
        };
        Hits {
            total: cost,
            within: cost,
            near,
            ..Hits::default()
        }
    }

    /// Each series' count, in the order of [`RULE_SERIES`].
    pub(crate) fn counts(&self) -> [u64; 5] {
        [self.total, self.within, self.near, self.over, self.shadow]
    }

    /// Counts these hits under `stat`, looking its series up.
    pub(crate) fn emit(&self, stat: &Stat) {
        let labels = stat.labels();
        for (name, n) in RULE_SERIES.into_iter().zip(self.counts()) {
            // Every series of a counted rule exists (0 included), as the reference's do.
            metrics::counter!(name, labels.clone()).increment(n);
        }
    }
}

/// The count past which hits are near `limit`: `floor(limit × ratio)`, the product taken in
/// single precision as the reference takes it (its ratio is a `float32`), so that the
/// threshold is the reference's for every limit and ratio.
pub(crate) fn near_threshold(limit: u64, ratio: f32) -> u64 {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let threshold = f64::from(limit as f32 * ratio).floor() as u64;
    threshold
}

#[cfg(test)]
mod tests {
    use super::Hits;

    /// The reference's `TestNearLimit` (`test/redis/fixed_cache_impl_test.go`), refused
    /// calls with counted refusals: (total, within, near, over, shadow).
    #[test]
    fn crossing_hits_split_as_the_reference() {
        // key8: 20 per second, 3 hits to 22 (from 19): 2 over, 1 near.
        assert_eq!(
            Hits::crossing(20, 22, 3, false, 0.8).counts(),
            [3, 0, 1, 2, 0]
        );
        // key9: 7 hits to 22 (from 15, below the threshold 16): 2 over, 4 near.
        assert_eq!(
            Hits::crossing(20, 22, 7, false, 0.8).counts(),
            [7, 0, 4, 2, 0]
        );
        // key10: 10 per second, 3 hits from the limit: all over.
        assert_eq!(
            Hits::crossing(10, 13, 3, false, 0.8).counts(),
            [3, 0, 0, 3, 0]
        );
        // Shadow mode counts the part past the limit (`increaseShadowModeStats`).
        assert_eq!(
            Hits::crossing(20, 22, 3, true, 0.8).counts(),
            [3, 0, 1, 2, 2]
        );
        // A count read back at or below the limit (another window by then): all over.
        assert_eq!(
            Hits::crossing(20, 20, 3, false, 0.8).counts(),
            [3, 0, 0, 3, 0]
        );
    }
}
