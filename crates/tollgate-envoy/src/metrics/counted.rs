//! [`Counted`]: how one matched descriptor counts in the statistics, found by the match
//! that decides it and carried to the count, so that nothing is matched twice.

use super::stat::Stat;
use super::stat_key::StatKey;

/// The statistics of one descriptor: its key and how its answer counts.
#[derive(Debug)]
pub(crate) enum Counted<'a> {
    /// By a rule (borrowed from the config's snapshot: nothing cloned per call).
    Rule(&'a StatKey),
    /// By a `detailed_metric` rule of an imported tree (its own key the fallback), each
    /// level labelled `key_<value>` with these values: the request's, or the pattern of a
    /// `share_threshold` wildcard, so that values sharing one counter share one label set.
    /// An empty value is `key_`, as the reference writes a detailed key (`key + "_" +
    /// value`), unless a level took a `share_threshold` pattern (the `bool`): the reference
    /// then writes that key as it does a `value_to_metric` one, `key` alone for an empty
    /// value.
    Detailed(&'a Stat, Vec<&'a str>, bool),
    /// By a `value_to_metric` rule of an imported tree (its own key the fallback): each level
    /// labelled as given (`key`, `key_value`, or the request's `key_<value>`).
    Valued(&'a Stat, Vec<String>),
    /// By a limit override (the request's entries, keys only beyond the bound).
    Override,
}
