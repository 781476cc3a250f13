//! What a limit does when its store cannot answer.
//!
//! A rate limiter in front of a paid API wants to fail closed; one in front of a login page
//! may prefer to fail open; one that must never hard-fail can fall back to counting on this
//! instance alone. Each limit says which, so the choice is made once, in config, and not in
//! scattered `match`es.

use serde::{Deserialize, Serialize};

/// The failure policy of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// Admit the request (fail open). Reported as a full quota.
    Allow,
    /// Refuse the request (fail closed). HTTP answers 503, not 429: the client is not at fault.
    Deny,
    /// Count on this instance alone, with an in-memory limiter of the same quota.
    Local,
}
