//! [`RuleCounters`]: the reference counters of one rule whose statistics key the config
//! fixes, held as handles so that counting a descriptor is five atomic adds.
//!
//! Why: `metrics::counter!` with labels builds the label set and looks the series up in the
//! recorder's registry on every call; five per descriptor made the reference statistics 7 %
//! of the Envoy service's CPU on a refusal the deny cache answers. The handles are taken on
//! the rule's first count (the recorder is installed by then) and live as long as the config:
//! a reload builds new rules, hence new handles, for the same series.

use metrics::Counter;

use super::hits::Hits;
use super::names::RULE_SERIES;
use super::stat::Stat;

/// The five counters of one rule's statistics key, in the order of [`RULE_SERIES`].
#[derive(Debug)]
pub(crate) struct RuleCounters([Counter; 5]);

impl RuleCounters {
    /// Registers (or finds) `stat`'s five series: every series of a counted rule exists, 0
    /// included, as the reference's do.
    pub(crate) fn new(stat: &Stat) -> RuleCounters {
        let labels = stat.labels();
        RuleCounters(RULE_SERIES.map(|name| metrics::counter!(name, labels.clone())))
    }

    /// Counts `hits`: five atomic adds at most.
    pub(crate) fn add(&self, hits: &Hits) {
        for (counter, n) in self.0.iter().zip(hits.counts()) {
            if n > 0 {
                counter.increment(n);
            }
        }
    }
}
