//! The answer to one limit for one request.

use std::time::Duration;

/// What one limit says about one request.
///
/// `retry_after` is exact to the microsecond here; on the wire (HTTP `Retry-After`, gRPC) it
/// is rounded **up** to whole seconds and is never 0 when denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request passes this limit.
    pub allowed: bool,
    /// The quota's limit (what `RateLimit-Policy` shows as `q=`).
    pub limit: u64,
    /// Unit-cost requests that would pass right now, after this call.
    pub remaining: u64,
    /// Until the key is back to a full quota.
    pub reset_after: Duration,
    /// When denied: the earliest moment this same cost would pass. `None` when allowed.
    pub retry_after: Option<Duration>,
}

impl Decision {
    /// Whether the request passes.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }
}
