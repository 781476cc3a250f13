//! The five algorithms as pure functions of `(state, now, cost)`.
//!
//! Nothing here reads a clock, allocates a key or touches a store: a rule is a quota turned
//! into arithmetic, and a state is plain data. The memory store runs these functions; each
//! has a Lua twin in `tollgate-redis/lua/` with the same integer arithmetic, and a
//! differential test holds the two to the same answers.
//!
//! **Supported times**: every instant the arithmetic reaches must stay below 2^53 µs since
//! the epoch (2255-06-05), the range in which the Lua twins' numbers (doubles) are exact
//! integers. That bounds more than `now`: the scripts also compute instants ahead of it, a
//! window's end (`now + period`), a queue of reservations (as deep as the longest
//! `max_wait`) and, the furthest a settlement reaches, GCRA's and the token bucket's debt
//! cap `tat = now + 2 × tau + h × T` (`tau = T × burst`, `h × T` = [`DEBT_HORIZON_US`], an
//! hour, rounded up to a whole `T`). So `now` plus the largest of these must stay below
//! 2^53: for a quota of a day or less whose burst is its limit, `now` up to a few days
//! before 2255-06-05 (reservations aside); for a GCRA of 3 per 366 days with a burst of 9
//! (`2 × tau + h × T` ≈ 6.3 years), only up to about January 2249 (at `now` =
//! 8_855_785_688_620_853, in 2250, Redis and the memory store disagreed). Within that range
//! no sum comes near `u64::MAX`. Beyond it the Rust arithmetic saturates (never panics nor
//! wraps round to an instant near 0, which would admit everything), answers may differ from
//! Redis's, and GCRA refuses a cost whose theoretical arrival time would pass `u64::MAX`
//! rather than pin it there (a pinned one would admit every later cost).

mod any_rule;
mod any_state;
mod fixed_window;
mod gcra;
mod rule;
mod schedule;
mod sliding_log;
mod sliding_window;
mod token_bucket;

pub use any_rule::AnyRule;
pub use any_state::AnyState;
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use rule::Rule;
pub(crate) use rule::decision;
pub use schedule::Schedule;
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::{DEFAULT_BUCKETS, SlidingWindow, SlidingWindowState};
pub use token_bucket::{TokenBucket, TokenBucketState};

/// How far ahead of now a queue of reservations may reach and still have settlements
/// counted on top of it, in µs: an hour, the longest wait the service lets an acquire ask
/// (`server.max_acquire_wait`). A settlement's debt is capped at one capacity beyond empty
/// plus this ([`Rule::debit`]): room for the deepest queue, yet a key's debt, and its Redis
/// key's expiry, stay bounded however much is settled. `lua/pace.lua` holds the same number.
pub const DEBT_HORIZON_US: u64 = 3_600_000_000;
