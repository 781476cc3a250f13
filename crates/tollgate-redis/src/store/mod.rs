//! [`RedisStore`]: runs the script on one Redis or a Redis Cluster, with a timeout and a
//! circuit breaker around every call.
//!
//! Design choices, and why:
//! - **One multiplexed connection, no pool**: the `redis` crate's `ConnectionManager`
//!   pipelines concurrent calls on one connection and reconnects after a failure; a pool
//!   would only add sockets (measured: one connection carries 100k+ EVALSHA/s). It has
//!   Nagle's algorithm off (`TCP_NODELAY`, see `src/store_builder.rs`), which the crate leaves on.
//! - **Coalesced calls** (`coalesce.rs`, on by default): requests that arrive while calls to
//!   the same Redis (slot) are in flight go next as one call of the batch script; a lone
//!   request goes out at once, as it would without coalescing.
//! - **Group by slot before calling**: a cluster refuses a script over keys of several slots,
//!   so entries are grouped by [`slot_of`](crate::slot_of) (always one group on a single Redis) — see the
//!   crate docs for the guarantee across groups.
//! - **The timeout covers the whole call**, all round trips of a cross-slot request included,
//!   and measures Redis's silence: a call waiting behind others fails only when Redis has
//!   answered nothing for a whole timeout, or a second after it ([`Patience`](crate::patience::Patience)). A call cut off by it has either run entirely on Redis or not at all, per group: a script
//!   is atomic. A cross-slot check cut off after some groups were charged keeps those units
//!   taken until they replenish (errs towards refusing).
//! - **A refusal due within a millisecond is decided again a millisecond later**, once, on
//!   the server's clock: GCRA there knows the instant only to the millisecond and errs
//!   towards refusing, and this gives back what that costs a burst taken within one
//!   millisecond (see `due_within_a_millisecond` in `decide.rs`).
//!
//! The children, each one job of the store, lowest layer first:
//! - `single_node`, `direct_nodes`, `connection`, `scripts`, `coalescer`: one node's
//!   connection, made again when the `redis` crate will not; on a cluster, the store's own
//!   connections to nodes an `ASK` names that the crate has none to (a new master with no
//!   slot yet); the connection and the one command it runs; the scripts' load state on it;
//!   and the queues of coalesced requests (data only);
//! - `slot_watch`: on a cluster, a new master for a slot whose calls time out, which the
//!   `redis` crate would not look for;
//! - `node_replies`: on a cluster, replies counted per master, so that a call to a silent
//!   master is not kept waiting by the others' answers;
//! - `redis_store`: [`RedisStore`] itself, its counters, and the guarded `EVALSHA` every call
//!   ends in (breaker, timeout, script reloads, slot moves);
//! - `clock`: the server's clock, sampled for deadlines;
//! - `unanswered`: a call whose caller stopped waiting runs on and gives back what it charged;
//! - `coalesce`: the calls that drain the queues, alone or as one batch;
//! - `decide`, `cross_slot`: one request's decision, on one slot or across several;
//! - `store_trait`: [`tollgate::Store`] for [`RedisStore`];
//! - `reset`, `check_permissions`, `batch`: resets, the start-up ACL check, and batches on
//!   demand for the tests and the benchmark.
//!
//! A child names only children above it in this list, so no two of them import each other
//! (`scripts/module-cycles --depth 2`): the store's handle knows nothing of coalescing nor
//! of give-backs, which are built on it.

mod batch;
mod check_permissions;
mod clock;
mod coalesce;
mod coalescer;
mod connection;
mod cross_slot;
mod decide;
mod direct_nodes;
mod node_replies;
mod redis_store;
mod reset;
mod scripts;
mod single_node;
mod slot_watch;
mod store_trait;
mod unanswered;

pub use coalescer::DEFAULT_MAX_BATCH;
pub(crate) use connection::{Cluster, Connection};
pub use redis_store::RedisStore;
pub(crate) use single_node::SingleNode;
