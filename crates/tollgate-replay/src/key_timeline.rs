//! [`KeyTimeline`]: one key's requests and refusals second by second, as the report draws
//! them (`crate::timeline` reads them from the log).

/// One key's requests and refusals, per second from the log's first second.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyTimeline {
    /// The key, as reports show it (`user=alice`).
    pub key: String,
    /// Requests per second.
    pub requests: Vec<u32>,
    /// Of which refused.
    pub refused: Vec<u32>,
}
