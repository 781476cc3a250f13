//! [`RuleCounters`]: the reference counters of one rule whose statistics key the config
//! fixes, held as handles so that counting a descriptor is five atomic adds.
//!
//! Why: `metrics::counter!` with labels builds the label set and looks the series up in the
//! recorder's registry on every call; five per descriptor made the reference statistics 7 %
//! of the Envoy service's CPU on a refusal the deny cache answers. The handles are taken on
//! the rule's first count (the recorder is installed by then) and live as long as the config:
//! a reload builds new rules, hence new handles, for the same series.

use metrics::Counter;

use crate::reference_metrics::{
    Hits, NEAR_LIMIT, OVER_LIMIT, SHADOW_MODE, Stat, TOTAL_HITS, WITHIN_LIMIT,
};

/// The five counters of one rule's statistics key.
#[derive(Debug)]
pub(crate) struct RuleCounters {
    total: Counter,
    within: Counter,
    near: Counter,
    over: Counter,
    shadow: Counter,
}

impl RuleCounters {
    /// Registers (or finds) `stat`'s five series: every series of a counted rule exists, 0
    /// included, as the reference's do.
    pub(crate) fn new(stat: &Stat) -> RuleCounters {
        let labels = stat.labels();
        let counter = |name: &'static str| metrics::counter!(name, labels.clone());
        RuleCounters {
            total: counter(TOTAL_HITS),
            within: counter(WITHIN_LIMIT),
            near: counter(NEAR_LIMIT),
            over: counter(OVER_LIMIT),
            shadow: counter(SHADOW_MODE),
        }
    }

    /// Counts `hits`: five atomic adds at most.
    pub(crate) fn add(&self, hits: &Hits) {
        for (counter, n) in [
            (&self.total, hits.total),
            (&self.within, hits.within),
            (&self.near, hits.near),
            (&self.over, hits.over),
            (&self.shadow, hits.shadow),
        ] {
            if n > 0 {
                counter.increment(n);
            }
        }
    }
}
