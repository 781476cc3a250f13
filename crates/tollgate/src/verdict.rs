//! The answer to a whole check: one decision per limit, how each was reached, and the
//! [`Outcome`] they add up to.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::{Decision, Need, OnStoreError, Outcome, POLICY_RETRY_AFTER, Quota, StoreErrorKind};

/// How a limit's decision was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The store decided.
    Store,
    /// This instance's exact deny cache answered: the store refused this cost for this key
    /// before, and the refusal still holds (see [`crate::LimiterBuilder::deny_cache`]).
    DenyCache,
    /// This instance's lease answered (a lease-mode limit, see [`crate::lease`]): units
    /// taken from the store earlier were handed out, or the store was known to have too few
    /// left.
    Lease,
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
    /// The limit's quota (for `RateLimit-Policy`).
    pub quota: Quota,
    /// Its decision.
    pub decision: Decision,
    /// How the decision was reached.
    pub source: Source,
    /// A shadow limit: its decision is reported, never enforced.
    pub shadow: bool,
    /// What the request needed of this entry ([`Need`]): a refusal of a [`Need::OneOf`] or
    /// [`Need::Optional`] entry refuses the request only as [`crate::Request::admitted`] says.
    pub need: Need,
}

impl LimitDecision {
    /// Whether the decision comes from a real count (the store, or the `local` fallback), as
    /// opposed to an `allow` or `deny` policy whose numbers are made up.
    pub fn is_counted(&self) -> bool {
        match self.source {
            Source::Store | Source::DenyCache | Source::Lease => true,
            Source::Policy { policy, .. } => policy == OnStoreError::Local,
        }
    }
}

/// The outcome of a check over one or several limits: all or nothing over the enforced
/// limits; shadow limits are reported but never refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    decisions: SmallVec<[LimitDecision; 2]>,
}

impl Verdict {
    pub(crate) fn new(decisions: SmallVec<[LimitDecision; 2]>) -> Verdict {
        debug_assert!(!decisions.is_empty(), "a request has at least one limit");
        Verdict { decisions }
    }

    /// What the verdict means for the request: allowed, limited (429) or unavailable (503).
    /// Match on it: a refusal because Redis timed out is not a refusal because of a quota.
    pub fn outcome(&self) -> Outcome {
        let mut limited: Option<Duration> = None;
        let mut unavailable: Option<StoreErrorKind> = None;
        // An any-of group refuses only when all of it does; then each of its refusals counts.
        let group_refuses = !Need::admits(
            self.enforced()
                .filter(|d| d.need == Need::OneOf)
                .map(|d| (d.need, d.decision.allowed)),
        );
        let refuses = |d: &&LimitDecision| {
            !d.decision.allowed
                && match d.need {
                    Need::Must => true,
                    Need::OneOf => group_refuses,
                    Need::Optional => false,
                }
        };
        for d in self.enforced().filter(refuses) {
            let wait = d.decision.retry_after.unwrap_or(POLICY_RETRY_AFTER);
            limited = limited.max(Some(wait));
            if let Source::Policy {
                policy: OnStoreError::Deny,
                error,
            } = d.source
            {
                unavailable.get_or_insert(error);
            }
        }
        match (unavailable, limited) {
            (Some(error), _) => Outcome::Unavailable {
                error,
                retry_after: POLICY_RETRY_AFTER,
            },
            (None, Some(retry_after)) => Outcome::Limited { retry_after },
            (None, None) => Outcome::Allowed,
        }
    }

    /// Each limit's decision, in the order asked, shadow limits included.
    pub fn decisions(&self) -> &[LimitDecision] {
        &self.decisions
    }

    /// The decisions of the enforced (not shadow) limits.
    pub fn enforced(&self) -> impl Iterator<Item = &LimitDecision> {
        self.decisions.iter().filter(|d| !d.shadow)
    }

    /// The most restrictive enforced limit (a shadow one when the request named only
    /// shadow limits): when refused, the refusal that lasts longest; when allowed, the one
    /// with the fewest remaining units (then the longest reset).
    pub fn decisive(&self) -> &LimitDecision {
        let first = &self.decisions[0];
        let pool = || {
            let enforced = self.decisions.iter().any(|d| !d.shadow);
            self.decisions.iter().filter(move |d| d.shadow != enforced)
        };
        if self.outcome() == Outcome::Allowed {
            pool()
                .min_by_key(|d| {
                    (
                        d.decision.remaining,
                        std::cmp::Reverse(d.decision.reset_after),
                    )
                })
                .unwrap_or(first)
        } else {
            pool()
                .filter(|d| !d.decision.allowed)
                .max_by_key(|d| d.decision.retry_after.unwrap_or(Duration::ZERO))
                .unwrap_or(first)
        }
    }

    /// The decision of the most restrictive limit.
    pub fn decision(&self) -> &Decision {
        &self.decisive().decision
    }

    /// When refused: when to retry (the longest wait among the refusals).
    pub fn retry_after(&self) -> Option<Duration> {
        self.outcome().retry_after()
    }

    /// The store error, when any limit was decided by its failure policy.
    pub fn store_error(&self) -> Option<StoreErrorKind> {
        self.decisions.iter().find_map(|d| match d.source {
            Source::Policy { error, .. } => Some(error),
            Source::Store | Source::DenyCache | Source::Lease => None,
        })
    }
}
