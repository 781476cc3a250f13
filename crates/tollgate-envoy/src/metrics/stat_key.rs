//! [`StatKey`]: how a rule names its statistics: fixed by the config, or made from the
//! request's values.

use std::sync::OnceLock;

use super::rule_counters::RuleCounters;
use super::stat::Stat;

/// How a rule names its statistics.
#[derive(Debug)]
pub(crate) enum StatKey {
    /// Fixed by the config: its counters, looked up on first use and then kept (a lookup is a
    /// label set built and hashed, five times per descriptor: 7 % of the Envoy service's CPU
    /// on a refusal answered by the deny cache, docs/benchmarks.md).
    Fixed(Stat, OnceLock<RuleCounters>),
    /// `detailed_metric`: the request's values, falling back to the rule's own key.
    Detailed(Stat),
    /// `value_to_metric` at some level: each level's label as the config writes it, or, where
    /// `None`, the request's `key_value` at that level; falling back to the rule's own key.
    Valued(Stat, Box<[Option<Box<str>>]>),
}

impl StatKey {
    /// A key fixed by the config.
    pub(crate) fn fixed(stat: Stat) -> StatKey {
        StatKey::Fixed(stat, OnceLock::new())
    }
}
