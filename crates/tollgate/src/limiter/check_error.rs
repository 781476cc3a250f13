//! Why a check could not be made at all, as opposed to a refusal (a [`crate::Decision`]) or a
//! store failure that a limit's policy turns into a decision.
//!
//! Every face (HTTP API, tower layer, Envoy service) gets these from
//! [`crate::Limiter::prepare`], before any store call, so a bad request changes nothing and
//! each face only maps the kind to its status code.

/// A request that can never be decided as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// No limit has this name.
    #[error("unknown limit {0:?}")]
    UnknownLimit(String),
    /// A check must name at least one limit.
    #[error("no limit given")]
    NoLimits,
    /// The same limit was named twice for the same key in one check.
    #[error("limit {0:?} is named twice for the same key")]
    DuplicateLimit(String),
    /// A cost of zero.
    #[error("cost must be at least 1")]
    ZeroCost,
    /// A cost that this limit can never admit, however long the caller waits
    /// (apart from "not now", which is a denied [`crate::Decision`]).
    #[error("cost {cost} exceeds what limit {limit:?} can ever admit ({capacity})")]
    CostExceedsCapacity {
        /// The limit.
        limit: String,
        /// The cost asked.
        cost: u64,
        /// The most it admits at once.
        capacity: u64,
    },
    /// The limit is keyed by a part the caller did not give.
    #[error("limit {limit:?} needs key part {part:?}")]
    MissingKeyPart {
        /// The limit.
        limit: String,
        /// The missing part's name.
        part: String,
    },
    /// [`crate::Request::count_refusals`] on a limit that cannot count refusals.
    #[error("limit {limit:?} cannot count refusals: it {reason}")]
    RefusalsNotCountable {
        /// The limit.
        limit: String,
        /// Why not.
        reason: &'static str,
    },
    /// A reservation ([`crate::Limiter::reserve`], [`crate::Limiter::acquire`]) on a limit
    /// whose algorithm has no future slots to hand out: only GCRA and the token bucket do.
    #[error(
        "limit {limit:?} cannot reserve a slot: its algorithm is {algorithm}; use gcra or token_bucket"
    )]
    CannotReserve {
        /// The limit.
        limit: String,
        /// Its algorithm's name.
        algorithm: String,
    },
    /// A reservation ([`crate::Limiter::reserve`], [`crate::Limiter::acquire`]) willing to
    /// wait longer than an hour (the settlements' debt horizon, `rules::DEBT_HORIZON_US`):
    /// a queue that deep would run the key's schedule past what settlements count with.
    #[error(
        "max_wait {}ms for limit {limit:?} is above the longest a reservation may wait ({} ms)",
        max_wait.as_millis(),
        longest.as_millis()
    )]
    MaxWaitTooLong {
        /// The limit.
        limit: String,
        /// The wait asked.
        max_wait: std::time::Duration,
        /// The longest accepted.
        longest: std::time::Duration,
    },
    /// A key part value longer than [`crate::MAX_KEY_VALUE`] bytes.
    #[error("key part {part:?} is longer than {max} bytes")]
    KeyPartTooLong {
        /// The part's name.
        part: String,
        /// The longest value accepted.
        max: usize,
    },
}
