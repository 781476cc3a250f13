//! The answer to a whole check: one decision per limit, how each was reached, and the
//! [`Outcome`] they add up to.
//!
//! What a client is shown is decided here, once, for every face (the HTTP API, the tower
//! layer, the Envoy service): a shadow limit's refusal shows as allowed
//! ([`LimitDecision::shown_allowed`]) and is counted as a would-be refusal
//! ([`LimitDecision::shadow_refused`]); only enforced limits with a real count show their
//! numbers ([`LimitDecision::shows_count`]); several limits' refusals merge into the longest
//! ([`longest_refusal`]), and the most restrictive limit speaks for the verdict
//! ([`Verdict::decisive`], [`Verdict::shown`]). Faces only translate these into JSON, gRPC or
//! headers.
//!
//! Beside it in `verdict/`: one limit's [`Decision`](crate::Decision) (with its
//! [`Admission`](crate::Admission)), [`Decisions`](crate::Decisions) (a store's answer, one per
//! entry), [`Outcome`](crate::Outcome) and [`Status`](crate::Status).

pub(crate) mod decision;
pub(crate) mod decisions;
pub(crate) mod outcome;
pub(crate) mod status;

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::verdict::outcome::POLICY_RETRY_AFTER;
use crate::{Admission, Decision, Need, NotUntil, OnStoreError, Outcome, Quota, StoreErrorKind};

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

    /// Whether the client is shown this limit as admitting: its decision admits, or it is a
    /// shadow limit (decided and counted, never refusing).
    #[inline]
    pub fn shown_allowed(&self) -> bool {
        self.shadow || self.decision.is_allowed()
    }

    /// A shadow limit that would have refused: shown as allowed, counted as a would-be
    /// refusal.
    #[inline]
    pub fn shadow_refused(&self) -> bool {
        self.shadow && !self.decision.is_allowed()
    }

    /// The refusal of an enforced limit (`None` when it admits, or is a shadow limit).
    #[inline]
    pub fn refusal(&self) -> Option<NotUntil> {
        if self.shadow {
            None
        } else {
            self.decision.refusal()
        }
    }

    /// Whether the client is shown this limit's count (`RateLimit`, `X-RateLimit-*`): an
    /// enforced limit whose decision comes from a real count ([`LimitDecision::is_counted`]).
    #[inline]
    pub fn shows_count(&self) -> bool {
        !self.shadow && self.is_counted()
    }
}

/// The longest refusal among the enforced limits of `decisions` (shadow limits never
/// refuse): the wait a client is told when several limits refuse at once. `None` when none
/// refuses.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Decision, LimitDecision, Need, NotUntil, Quota, Source, longest_refusal};
///
/// let of = |retry: Option<u64>, shadow: bool| LimitDecision {
///     limit: "l".into(),
///     quota: Quota::per_second(1).unwrap(),
///     decision: match retry {
///         None => Decision::allowed(1, 1, Duration::ZERO),
///         Some(s) => Decision::refused(1, 0, Duration::ZERO, Duration::from_secs(s)),
///     },
///     source: Source::Store,
///     shadow,
///     need: Need::Must,
/// };
/// let decisions = [of(Some(2), false), of(None, false), of(Some(9), true), of(Some(5), false)];
/// assert_eq!(longest_refusal(&decisions), Some(NotUntil::new(Duration::from_secs(5))));
/// assert_eq!(longest_refusal(&decisions[1..3]), None);
/// ```
pub fn longest_refusal<'a>(
    decisions: impl IntoIterator<Item = &'a LimitDecision>,
) -> Option<NotUntil> {
    decisions
        .into_iter()
        .filter_map(LimitDecision::refusal)
        .max()
}

/// The outcome of a check over one or several limits: all or nothing over the enforced
/// limits; shadow limits are reported but never refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a verdict refuses nothing unless it is read: match `outcome()`"]
pub struct Verdict {
    decisions: SmallVec<[LimitDecision; 2]>,
}

impl Verdict {
    pub(crate) fn new(decisions: SmallVec<[LimitDecision; 2]>) -> Verdict {
        debug_assert!(!decisions.is_empty(), "a request has at least one limit");
        Verdict { decisions }
    }

    /// The verdict of these decisions, in the order the limits were asked; `None` for no
    /// decision (a request has at least one limit). For tests of code that answers verdicts,
    /// and for a face that gets its decisions elsewhere: the outcome is derived from them,
    /// as for a verdict [`crate::Limiter`] returns.
    pub fn from_decisions(decisions: impl IntoIterator<Item = LimitDecision>) -> Option<Verdict> {
        let decisions: SmallVec<[LimitDecision; 2]> = decisions.into_iter().collect();
        (!decisions.is_empty()).then_some(Verdict { decisions })
    }

    /// What the verdict means for the request: allowed, limited (429) or unavailable (503).
    /// Match on it: a refusal because Redis timed out is not a refusal because of a quota.
    pub fn outcome(&self) -> Outcome {
        // An any-of group refuses only when all of it does; then each of its refusals counts.
        let group_refuses = !Need::admits(
            self.enforced()
                .filter(|d| d.need == Need::OneOf)
                .map(|d| (d.need, d.decision.is_allowed())),
        );
        let refuses = |d: &&LimitDecision| {
            !d.decision.is_allowed()
                && match d.need {
                    Need::Must => true,
                    Need::OneOf => group_refuses,
                    Need::Optional => false,
                }
        };
        let unavailable = self
            .enforced()
            .filter(refuses)
            .find_map(|d| match d.source {
                Source::Policy {
                    policy: OnStoreError::Deny,
                    error,
                } => Some(error),
                _ => None,
            });
        match (
            unavailable,
            longest_refusal(self.enforced().filter(refuses)),
        ) {
            (Some(error), _) => Outcome::Unavailable {
                error,
                retry_after: POLICY_RETRY_AFTER,
            },
            (None, Some(refusal)) => Outcome::Limited {
                retry_after: refusal.retry_after(),
            },
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
        self.decisive_in(self.outcome() == Outcome::Allowed)
    }

    /// [`Verdict::decisive`], the verdict admitting or not as `allowed` says.
    fn decisive_in(&self, allowed: bool) -> &LimitDecision {
        let first = &self.decisions[0];
        let pool = || {
            let enforced = self.decisions.iter().any(|d| !d.shadow);
            self.decisions.iter().filter(move |d| d.shadow != enforced)
        };
        if allowed {
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
                .filter_map(|d| d.decision.refusal().map(|r| (r, d)))
                .max_by_key(|(r, _)| *r)
                .map_or(first, |(_, d)| d)
        }
    }

    /// The most restrictive limit's decision as the client is shown it: admitting when the
    /// verdict admits (the decisive limit may be a shadow limit, or an entry whose refusal
    /// the request did not need), refused with its own wait when the verdict refuses. What
    /// the HTTP API's top-level fields show.
    pub fn shown(&self) -> Decision {
        let allowed = self.outcome() == Outcome::Allowed;
        let mut shown = self.decisive_in(allowed).decision;
        if allowed {
            shown.admission = Admission::Allowed;
        }
        shown
    }

    /// The decision of the most restrictive limit, as the client is shown it
    /// ([`Verdict::shown`]): admitting whenever the verdict admits. (It was the decisive
    /// limit's own decision: a verdict of shadow limits alone, whose refusals never refuse,
    /// read `is_allowed() == false` with a retry, and code answering 429 on it enforced a
    /// limit meant to be shadow. The limit's own is [`Verdict::decisive`]'s.)
    pub fn decision(&self) -> Decision {
        self.shown()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn of(name: &str, decision: Decision, shadow: bool) -> LimitDecision {
        LimitDecision {
            limit: name.into(),
            quota: Quota::per_minute(10).expect("valid"),
            decision,
            source: Source::Store,
            shadow,
            need: Need::Must,
        }
    }

    fn allowed(remaining: u64) -> Decision {
        Decision::allowed(10, remaining, Duration::from_secs(6))
    }

    fn refused(wait_ms: u64) -> Decision {
        Decision::refused(
            10,
            0,
            Duration::from_secs(60),
            Duration::from_millis(wait_ms),
        )
    }

    fn verdict(decisions: Vec<LimitDecision>) -> Verdict {
        Verdict::new(decisions.into_iter().collect())
    }

    /// A shadow limit's refusal is shown as allowed and counted as a would-be refusal; an
    /// enforced refusal is neither; only enforced, counted limits show their count.
    #[test]
    fn a_shadow_refusal_is_shown_as_allowed() {
        let shadow = of("s", refused(500), true);
        assert!(shadow.shown_allowed());
        assert!(shadow.shadow_refused());
        assert_eq!(shadow.refusal(), None, "a shadow limit never refuses");
        assert!(!shadow.shows_count());
        let enforced = of("e", refused(500), false);
        assert!(!enforced.shown_allowed());
        assert!(!enforced.shadow_refused());
        assert_eq!(
            enforced.refusal(),
            Some(NotUntil::new(Duration::from_millis(500)))
        );
        assert!(enforced.shows_count());
        let admitting_shadow = of("s", allowed(3), true);
        assert!(admitting_shadow.shown_allowed() && !admitting_shadow.shadow_refused());
        let mut by_policy = of("p", allowed(10), false);
        by_policy.source = Source::Policy {
            policy: OnStoreError::Allow,
            error: StoreErrorKind::Timeout,
        };
        assert!(
            !by_policy.shows_count(),
            "an allow policy has no real count"
        );
    }

    /// Several refusals merge into the longest enforced one; the decisive limit is that
    /// refusal, or, when the verdict admits, the one with the fewest remaining units.
    #[test]
    fn merging_picks_the_deciding_limit() {
        let v = verdict(vec![
            of("short", refused(200), false),
            of("shadow", refused(9_000), true),
            of("long", refused(1_500), false),
            of("ok", allowed(4), false),
        ]);
        assert_eq!(
            longest_refusal(v.decisions()),
            Some(NotUntil::new(Duration::from_millis(1_500)))
        );
        assert_eq!(
            v.outcome(),
            Outcome::Limited {
                retry_after: Duration::from_millis(1_500)
            }
        );
        assert_eq!(&*v.decisive().limit, "long");
        assert_eq!(v.shown().retry_after(), Some(Duration::from_millis(1_500)));
        let v = verdict(vec![
            of("a", allowed(7), false),
            of("b", allowed(2), false),
            of("shadow", refused(100), true),
        ]);
        assert_eq!(longest_refusal(v.decisions()), None);
        assert_eq!(v.outcome(), Outcome::Allowed);
        assert_eq!(&*v.decisive().limit, "b");
        assert_eq!(v.shown(), allowed(2));
    }

    /// A request of shadow limits only is admitted: its decisive limit is a shadow one, and
    /// its refusal is shown as an admission with its numbers.
    #[test]
    fn a_shadow_only_verdict_shows_its_refusal_as_allowed() {
        let v = verdict(vec![
            of("s1", allowed(5), true),
            of("s2", refused(700), true),
        ]);
        assert_eq!(v.outcome(), Outcome::Allowed);
        assert_eq!(&*v.decisive().limit, "s2", "the fewest remaining");
        assert!(!v.decisive().decision.is_allowed());
        let shown = v.shown();
        assert!(shown.is_allowed(), "{shown:?}");
        assert_eq!(shown.retry_after(), None);
        assert_eq!(
            (shown.remaining, shown.reset_after),
            (0, Duration::from_secs(60))
        );
    }
}
