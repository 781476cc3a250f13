//! `tollgate_decisions_total{limit, outcome}`: one limit's four series, as handles kept from
//! its first decision on.
//!
//! Why kept: `metrics::counter!` with labels looks its series up in the recorder on every
//! call (the key built and hashed, the series found): about 750 instructions a decision
//! under the service's recorder (callgrind, a one-limit check on the memory store), where
//! the add itself is one atomic. A handle kept is the add alone.
//!
//! Registered on the limit's first decision, not when the limiter is built: a recorder
//! installed in between (the service builds its limits first) gets every count. One
//! installed after a limit's first decision does not get that limit's: install the
//! recorder when the program starts, as the `metrics` crate asks.

use std::sync::{Arc, OnceLock};

use metrics::Counter;

use crate::Source;

/// How a decision ended, as counted: its `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// The store (or the deny cache, or a lease) admitted.
    Allowed,
    /// The store (or the deny cache, or a lease) refused.
    Denied,
    /// The store failed and the limit's policy admitted.
    StoreErrorAllowed,
    /// The store failed and the limit's policy refused.
    StoreErrorDenied,
}

impl Counted {
    /// How a decision from `source` that admitted or not is counted.
    pub(crate) fn of(source: Source, allowed: bool) -> Counted {
        match (source, allowed) {
            (Source::Store | Source::DenyCache | Source::Lease, true) => Counted::Allowed,
            (Source::Store | Source::DenyCache | Source::Lease, false) => Counted::Denied,
            (Source::Policy { .. }, true) => Counted::StoreErrorAllowed,
            (Source::Policy { .. }, false) => Counted::StoreErrorDenied,
        }
    }

    /// The `outcome` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Counted::Allowed => "allowed",
            Counted::Denied => "denied",
            Counted::StoreErrorAllowed => "store_error_allowed",
            Counted::StoreErrorDenied => "store_error_denied",
        }
    }

    const ALL: [Counted; 4] = [
        Counted::Allowed,
        Counted::Denied,
        Counted::StoreErrorAllowed,
        Counted::StoreErrorDenied,
    ];
}

/// One limit's `tollgate_decisions_total` series, registered on first use.
#[derive(Debug, Default)]
pub(crate) struct DecisionCounters {
    handles: OnceLock<[Counter; 4]>,
}

impl DecisionCounters {
    /// Counts one decision of `limit` (the limit these counters are for).
    pub(crate) fn count(&self, limit: &Arc<str>, counted: Counted) {
        let handles = self
            .handles
            .get_or_init(|| Counted::ALL.map(|c| series(limit, c)));
        handles[counted as usize].increment(1);
    }
}

/// The `tollgate_decisions_total` series of `limit` and `counted`, looked up in the recorder
/// (for a limit without kept handles, a decision is counted through this each time).
pub(crate) fn series(limit: &Arc<str>, counted: Counted) -> Counter {
    metrics::counter!(
        "tollgate_decisions_total",
        "limit" => Arc::clone(limit),
        "outcome" => counted.label()
    )
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::{OnStoreError, StoreErrorKind};

    /// Each outcome goes to its own series, every time, under the recorder current at the
    /// first count; the index of a handle is its outcome's.
    #[test]
    fn each_outcome_is_counted_in_its_own_series() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let limit: Arc<str> = Arc::from("sms");
        let policy = Source::Policy {
            policy: OnStoreError::Deny,
            error: StoreErrorKind::Timeout,
        };
        metrics::with_local_recorder(&recorder, || {
            let counters = DecisionCounters::default();
            let decisions = [
                (Source::Store, true, 3),
                (Source::DenyCache, false, 2),
                (policy, true, 1),
                (policy, false, 4),
            ];
            for (source, allowed, times) in decisions {
                for _ in 0..times {
                    counters.count(&limit, Counted::of(source, allowed));
                }
            }
        });
        let mut counts: Vec<(String, u64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                assert_eq!(key.name(), "tollgate_decisions_total");
                let label = |name: &str| {
                    key.labels()
                        .find(|l| l.key() == name)
                        .map(|l| l.value().to_owned())
                        .expect("label")
                };
                assert_eq!(label("limit"), "sms");
                let DebugValue::Counter(n) = value else {
                    panic!("a counter");
                };
                (label("outcome"), n)
            })
            .collect();
        counts.sort();
        assert_eq!(
            counts,
            [
                ("allowed".to_owned(), 3),
                ("denied".to_owned(), 2),
                ("store_error_allowed".to_owned(), 1),
                ("store_error_denied".to_owned(), 4),
            ]
        );
    }
}
