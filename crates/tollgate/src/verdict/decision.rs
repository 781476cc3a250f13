//! The answer to one limit for one request.
//!
//! A refusal is a value of its own ([`NotUntil`], in the spirit of governor's): it knows how
//! long to wait, and an admission has no wait at all. A `bool` and an `Option<Duration>` side
//! by side could say "allowed, retry in 2 s", and every face had to guard against it; an
//! [`Admission`] cannot.

use std::time::Duration;

use crate::wire;

/// A refusal: the earliest moment the same cost would pass, as a wait from the decision.
///
/// The wait is exact to the microsecond here; on the wire (HTTP `Retry-After`, gRPC) it is
/// rounded **up** to whole seconds and is never 0 ([`NotUntil::retry_after_secs`]).
///
/// ```
/// use std::time::Duration;
/// use tollgate::NotUntil;
///
/// let refusal = NotUntil::new(Duration::from_millis(1_200));
/// assert_eq!(refusal.retry_after(), Duration::from_millis(1_200));
/// assert_eq!(refusal.retry_after_secs(), 2);
/// assert_eq!(refusal.retry_after_millis(), 1_200);
/// // A wait shorter than a second is still a second on the wire: "retry now" is never said.
/// assert_eq!(NotUntil::new(Duration::ZERO).retry_after_secs(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NotUntil {
    wait: Duration,
}

impl NotUntil {
    /// A refusal that holds for `wait`.
    #[inline]
    pub const fn new(wait: Duration) -> NotUntil {
        NotUntil { wait }
    }

    /// How long to wait before the same cost would pass (exact).
    #[inline]
    pub const fn retry_after(&self) -> Duration {
        self.wait
    }

    /// The wait as a `Retry-After` value: whole seconds, rounded up, at least 1
    /// ([`wire::retry_after_secs`]).
    #[inline]
    pub fn retry_after_secs(&self) -> u64 {
        wire::retry_after_secs(self.wait)
    }

    /// The wait in whole milliseconds, rounded up ([`wire::ceil_millis`]): the HTTP API's
    /// `retry_after_ms`.
    #[inline]
    pub fn retry_after_millis(&self) -> u64 {
        wire::ceil_millis(self.wait)
    }
}

/// Whether a request passes one limit; a refusal carries its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// The request passes.
    Allowed,
    /// The request is refused until the wait is over.
    Refused(NotUntil),
}

impl Admission {
    /// Admitted when `wait` is `None`, else refused for `wait` (the shape the algorithms
    /// compute: a wait exactly when they refuse).
    #[inline]
    pub fn from_wait(wait: Option<Duration>) -> Admission {
        match wait {
            None => Admission::Allowed,
            Some(wait) => Admission::Refused(NotUntil::new(wait)),
        }
    }

    /// Whether the request passes.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        matches!(self, Admission::Allowed)
    }

    /// The refusal, when refused.
    #[inline]
    pub fn refusal(&self) -> Option<NotUntil> {
        match *self {
            Admission::Allowed => None,
            Admission::Refused(refusal) => Some(refusal),
        }
    }
}

/// What one limit says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a decision refuses nothing unless it is read: see `is_allowed()`"]
pub struct Decision {
    /// Whether the request passes this limit, and when refused, for how long.
    pub admission: Admission,
    /// The quota's limit (what `RateLimit-Policy` shows as `q=`).
    pub limit: u64,
    /// Unit-cost requests that would pass right now, after this call.
    pub remaining: u64,
    /// Until the key is back to a full quota.
    pub reset_after: Duration,
}

impl Decision {
    /// An admission.
    #[inline]
    pub fn allowed(limit: u64, remaining: u64, reset_after: Duration) -> Decision {
        Decision {
            admission: Admission::Allowed,
            limit,
            remaining,
            reset_after,
        }
    }

    /// A refusal that holds for `retry_after`.
    #[inline]
    pub fn refused(
        limit: u64,
        remaining: u64,
        reset_after: Duration,
        retry_after: Duration,
    ) -> Decision {
        Decision {
            admission: Admission::Refused(NotUntil::new(retry_after)),
            limit,
            remaining,
            reset_after,
        }
    }

    /// Whether the request passes.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.admission.is_allowed()
    }

    /// The refusal, when refused.
    #[inline]
    pub fn refusal(&self) -> Option<NotUntil> {
        self.admission.refusal()
    }

    /// When refused: the earliest moment this same cost would pass. `None` when allowed.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        self.refusal().map(|r| r.retry_after())
    }

    /// This decision as a refusal of a cost that can never pass (it asks more than the
    /// limit's capacity), reported with the limit's state: unchanged when it already
    /// refuses, else refused until the key is back to a full quota (`reset_after`), the
    /// best this limit can ever offer. (The Envoy face answers such a descriptor
    /// `OVER_LIMIT` from a peek at the limit's capacity.)
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Decision;
    ///
    /// let peeked = Decision::allowed(10, 10, Duration::ZERO);
    /// assert_eq!(peeked.never().retry_after(), Some(Duration::ZERO));
    /// let refused = Decision::refused(10, 3, Duration::from_secs(7), Duration::from_secs(5));
    /// assert_eq!(refused.never(), refused);
    /// ```
    pub fn never(self) -> Decision {
        match self.admission {
            Admission::Refused(_) => self,
            Admission::Allowed => Decision {
                admission: Admission::Refused(NotUntil::new(self.reset_after)),
                ..self
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An admission has no wait; a refusal has exactly the one it was made with.
    #[test]
    fn a_refusal_knows_its_wait_and_an_admission_has_none() {
        let allowed = Decision::allowed(5, 4, Duration::from_secs(1));
        assert!(allowed.is_allowed());
        assert_eq!(allowed.retry_after(), None);
        assert_eq!(allowed.refusal(), None);
        let wait = Duration::from_micros(1_500_001);
        let refused = Decision::refused(5, 0, Duration::from_secs(3), wait);
        assert!(!refused.is_allowed());
        assert_eq!(refused.retry_after(), Some(wait));
        let refusal = refused.refusal().expect("refused");
        assert_eq!(refusal.retry_after(), wait);
        assert_eq!(refusal.retry_after_secs(), 2);
        assert_eq!(refusal.retry_after_millis(), 1_501);
        assert_eq!(Admission::from_wait(None), Admission::Allowed);
        assert_eq!(
            Admission::from_wait(Some(wait)),
            Admission::Refused(refusal)
        );
    }

    /// On the wire a wait is never 0, however short: 0 µs and 1 µs are both 1 s.
    #[test]
    fn a_wait_is_never_zero_seconds() {
        for micros in [0, 1, 999_999, 1_000_000] {
            let r = NotUntil::new(Duration::from_micros(micros));
            assert_eq!(r.retry_after_secs(), 1, "{micros} µs");
        }
        assert_eq!(
            NotUntil::new(Duration::from_micros(1_000_001)).retry_after_secs(),
            2
        );
    }

    /// A too costly admission becomes a refusal until the key is full; a refusal stays.
    #[test]
    fn never_refuses_until_the_quota_is_full() {
        let peeked = Decision::allowed(10, 4, Duration::from_millis(600));
        let never = peeked.never();
        assert_eq!(never.retry_after(), Some(Duration::from_millis(600)));
        assert_eq!((never.limit, never.remaining), (10, 4));
        let refused = Decision::refused(10, 0, Duration::from_secs(9), Duration::from_secs(2));
        assert_eq!(refused.never(), refused);
    }
}
