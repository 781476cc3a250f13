//! # tollgate-redis
//!
//! [`RedisStore`]: the [`tollgate::Store`] on Redis or Redis Cluster, so that every instance
//! of a service shares one limit. Each algorithm is a Lua function (`lua/<algorithm>.lua`)
//! mirroring its Rust twin in `tollgate::rules` with the same integer arithmetic; a
//! differential test holds the two to identical decisions.
//!
//! ## One script, N entries
//! The five algorithm files, a prelude and a dispatcher (`lua/check.lua`) are concatenated
//! into **one** general script, loaded once and run by `EVALSHA`. One call carries every
//! (limit, key) entry of a request in `KEYS[]`, each with its algorithm tag and parameters in
//! `ARGV`, so a multi-limit request mixing algorithms is still one round trip and one atomic
//! step: the dispatcher decides every entry first and charges them all only if all admit. A
//! denied call writes nothing. A request of a single limit runs that algorithm's
//! single-entry script instead (same files, less Lua per call; GCRA's takes three arguments and
//! answers one integer, its state, from which the Rust rule computes the decision). How the
//! algorithms' scripts differ is written in one table (`src/script/port.rs`).
//!
//! ## Coalesced calls
//! A request goes out alone, with its own script as above, while fewer than sixteen calls to
//! the same Redis (the same slot on a cluster: one queue each) are in flight and fewer than
//! two of them are batch calls; a lone request waits for nothing. Requests that arrive while
//! sixteen calls, or two batch calls, of their queue are in flight queue, and go next, when
//! one of those calls ends, as one call of the batch script (`lua/batch.lua`; a single queued
//! request as its own call), which decides each of them on its own by the same dispatcher:
//! one call's overhead for many decisions. A batch of one-limit GCRA checks goes as GCRA's
//! own batch script (`lua/batch_gcra.lua`, the same body), which skips the dispatch
//! (`src/store/coalesce.rs` says why these numbers). On by default
//! ([`RedisStoreBuilder::coalesce`], [`RedisStoreBuilder::max_batch`]); counted in
//! `tollgate_redis_batches_total` and `tollgate_redis_batched_requests_total`.
//!
//! ## Where all-or-nothing holds
//! - **Single Redis**: always one script, atomic over every entry.
//! - **Redis Cluster, entries in one hash slot** (limits keyed by the same parts share a hash
//!   tag, hence a slot): one script on that slot's node, atomic.
//! - **Redis Cluster, entries across slots**: one script per slot group, in order. If a later
//!   group denies, the groups already charged are given back (script op 2). This is a weaker
//!   guarantee: between the charge and the give-back, other callers see the units taken (they
//!   may be refused when an atomic store would admit them, never admitted wrongly), and if the
//!   give-back itself fails (node lost, timeout) the units stay taken until they replenish.
//!   Each group decides on its own node's clock (a key is always judged by the clock of the
//!   node that holds it), and a give-back undoes at the instant its group charged.
//!
//! ## Time
//! `now: None` uses the server's clock inside the script, so instances whose clocks disagree
//! decide identically: `TIME`, or for GCRA the key's own expiry, which *is* its state
//! (`lua/gcra.lua`); GCRA then knows the instant to the millisecond and errs towards refusing,
//! never admitting before the microsecond rule would. `now: Some` is the caller's clock, for tests and simulation; GCRA keeps
//! its state differently there, so one key must not be shared between a limiter with a clock
//! and one without (the server-clock side then reads the key as at least as spent as it is,
//! never less; the other side reads it as unspent).
//!
//! ## Failures
//! Every call has a timeout (default 50 ms) that measures Redis's silence, not this process's
//! queue: a call fails when Redis answered nothing on the store for a whole timeout (on a
//! cluster, nothing from the call's master, when its keys are on one), and one second after
//! its timeout in any case (`src/patience.rs`, [`longest_wait`]). Errors are classified into
//! [`tollgate::StoreErrorKind`]s, and a circuit breaker skips Redis for a cool-down after
//! repeated transient failures ([`tollgate::StoreError::CircuitOpen`]), then lets one probe
//! through. The [`tollgate::Limiter`] applies each limit's failure policy and counts errors
//! (`tollgate_store_errors_total{kind}`); this crate adds only what the limiter cannot see:
//! `tollgate_store_circuit_open` (gauge, 1 while open), `tollgate_store_circuit_opened_total`,
//! `tollgate_redis_cross_slot_give_backs_total`, `tollgate_redis_late_scripts_total` and
//! `tollgate_redis_unanswered_give_backs_total`.
//!
//! A call that timed out costs nothing: each check carries a deadline on the server's clock,
//! and a script that starts after it writes nothing (`src/deadline.rs`); a call whose caller
//! stopped waiting runs to its end and gives back what it charged (`src/store/unanswered.rs`). Reconnection is the `redis` crate's
//! `ConnectionManager` (single) or cluster client's: one multiplexed connection, no pool.

mod breaker;
mod deadline;
mod error;
mod lease;
mod node_options;
mod pace;
mod patience;
mod permissions;
mod resets;
mod script;
mod sentinel;
mod slot;
mod store;
mod store_builder;
mod subscriber;
mod tls;

pub use patience::longest_wait;
pub use permissions::{COMMANDS, Needed, least_privilege_acl};
pub use resets::reset_channel;
#[doc(hidden)]
pub use script::ScriptCall;
pub use slot::slot_of;
pub use store::{DEFAULT_MAX_BATCH, RedisStore};
pub use store_builder::{
    DEAD_CONNECTION_TIMEOUT, DEFAULT_COOL_DOWN, DEFAULT_FAILURE_THRESHOLD, DEFAULT_TIMEOUT,
    RedisStoreBuilder,
};
