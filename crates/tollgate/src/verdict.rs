//! The answer to a whole check: one decision per limit, and how each was reached.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::{Decision, OnStoreError, StoreErrorKind};

/// How a limit's decision was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The store decided.
    Store,
    /// The store failed and the limit's policy decided.
    Policy {
        /// The policy applied.
        policy: OnStoreError,
        /// What went wrong with the store.
        error: StoreErrorKind,
    },
}

/// One limit's part of a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDecision {
    /// The limit's name.
    pub limit: Arc<str>,
    /// Its decision.
    pub decision: Decision,
    /// How the decision was reached.
    pub source: Source,
}

/// The outcome of a check over one or several limits, all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    decisions: SmallVec<[LimitDecision; 2]>,
}

impl Verdict {
    pub(crate) fn new(decisions: SmallVec<[LimitDecision; 2]>) -> Verdict {
        debug_assert!(!decisions.is_empty(), "a request has at least one limit");
        Verdict { decisions }
    }

    /// Whether every limit admits (and so every limit was charged, for a check).
    pub fn is_allowed(&self) -> bool {
        self.decisions.iter().all(|d| d.decision.allowed)
    }

    /// Each limit's decision, in the order asked.
    pub fn decisions(&self) -> &[LimitDecision] {
        &self.decisions
    }

    /// The most restrictive limit: when denied, the denial that lasts longest; when allowed,
    /// the one with the fewest remaining units (then the longest reset).
    pub fn decisive(&self) -> &LimitDecision {
        let first = &self.decisions[0];
        if self.is_allowed() {
            self.decisions.iter().fold(first, |best, d| {
                let (a, b) = (&d.decision, &best.decision);
                if (a.remaining, std::cmp::Reverse(a.reset_after))
                    < (b.remaining, std::cmp::Reverse(b.reset_after))
                {
                    d
                } else {
                    best
                }
            })
        } else {
            self.decisions
                .iter()
                .filter(|d| !d.decision.allowed)
                .max_by_key(|d| d.decision.retry_after.unwrap_or(Duration::ZERO))
                .unwrap_or(first)
        }
    }

    /// The decision of the most restrictive limit.
    pub fn decision(&self) -> &Decision {
        &self.decisive().decision
    }

    /// When denied: when to retry (the longest wait among the denials).
    pub fn retry_after(&self) -> Option<Duration> {
        self.decision().retry_after
    }

    /// Whether the request is refused because the store failed and a limit's policy is
    /// `deny` (HTTP 503), rather than because a quota is used up (HTTP 429).
    pub fn is_store_failure(&self) -> bool {
        !self.is_allowed()
            && self.decisions.iter().any(|d| {
                !d.decision.allowed
                    && matches!(
                        d.source,
                        Source::Policy {
                            policy: OnStoreError::Deny,
                            ..
                        }
                    )
            })
    }

    /// The store error, when any limit was decided by its failure policy.
    pub fn store_error(&self) -> Option<StoreErrorKind> {
        self.decisions.iter().find_map(|d| match d.source {
            Source::Policy { error, .. } => Some(error),
            Source::Store => None,
        })
    }
}
