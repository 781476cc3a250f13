//! The three answers a caller must tell apart.
//!
//! A check passes, is refused because a quota is used up, or is refused because the store
//! failed and a limit's `deny` policy refuses. The last two are both "not allowed", but they
//! are different facts: one is the client's doing (HTTP 429, count it as abuse), the other is
//! ours (HTTP 503, page someone). A `bool` lets a caller count Redis timeouts as refusals
//! without noticing; an enum the caller matches on does not.

use std::time::Duration;

use crate::StoreErrorKind;

/// How long a request denied by a `deny` policy is told to wait.
pub(crate) const POLICY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a [`crate::Verdict`] means for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    /// Every enforced limit admits (and, for a check, was charged). This includes limits
    /// whose store failed and whose policy is `allow` or `local`-and-admitting: see
    /// [`crate::Verdict::store_error`] for those.
    Allowed,
    /// A quota refuses: the client should wait `retry_after` (HTTP 429).
    Limited {
        /// The longest wait among the refusing limits.
        retry_after: Duration,
    },
    /// The store failed and a limit's `deny` policy refuses (HTTP 503): not the client's
    /// fault, and nothing was charged.
    Unavailable {
        /// What went wrong with the store.
        error: StoreErrorKind,
        /// How long to wait before trying again (1 s).
        retry_after: Duration,
    },
}

impl Outcome {
    /// When refused: how long to wait.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Outcome::Allowed => None,
            Outcome::Limited { retry_after } | Outcome::Unavailable { retry_after, .. } => {
                Some(*retry_after)
            }
        }
    }
}
