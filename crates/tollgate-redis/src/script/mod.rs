//! The Lua scripts: their source (the `lua/` files composed), their arguments, and the
//! decoding of their reply into typed decisions — in one place, so no caller indexes a reply.
//!
//! Compositions of the same files:
//! - **the general script** — prelude, all five algorithm functions, the dispatcher
//!   (`lua/request.lua`, then `lua/check.lua`) — decides N entries of any algorithms all or
//!   nothing. A request may combine limits of different algorithms, and all-or-nothing over
//!   them needs one atomic step.
//! - **the batch script** — the same, with `lua/batch.lua` in place of `lua/check.lua` —
//!   decides M independent requests in one call, each all or nothing by the same
//!   `lua/request.lua` (coalesced calls, `src/store/coalesce.rs`).
//! - **the lone-check batch script of an algorithm**, GCRA's only (`lua/batch_gcra.lua` after
//!   GCRA's body as a function): a batch whose every request is one check of one GCRA key on
//!   one kind of clock — the common batch — decided without the general batch's per-request
//!   header, dispatch, four-value replies and `TIME`; each request answers as its
//!   single-entry script would.
//! - **one single-entry script per algorithm**, for requests of one limit (the common case):
//!   Redis then builds one algorithm's closure per call instead of five and nothing
//!   dispatches. GCRA's is leaner still (`lua/one_gcra.lua` then the body `lua/gcra.lua`): no
//!   closure, no `TIME` (on the server's clock its state is the key's expiry), three arguments
//!   and a one-integer reply. Measured in `docs/benchmarks.md`: about half the Redis CPU of
//!   the general shape.
//!
//! ## One table knows how the algorithms differ
//! GCRA is the odd one out for speed: its Lua answers one integer, its state relative to now,
//! not a decision, and its single-entry script takes its own arguments. Rather than testing
//! for GCRA wherever scripts are composed, called and decoded, each algorithm has one row in
//! [`PORTS`]: its tag and function, its parameters, its single-entry script and its
//! [`Reply`]. Everything else is generic over the rows, and GCRA's row is the only place in
//! this crate that knows GCRA is different:
//! - **arguments**: every single-entry script takes the entry's own arguments first (the row
//!   says which) and op and clock last, left out for the common call (a check on the
//!   server's clock); the general script takes op and clock, then a tag, the entry's own
//!   cost and three parameters per entry, for every algorithm alike;
//! - **replies**: every script's answer is read as one shape, an optional instant (`now`,
//!   which GCRA's single-entry script on the server's clock has none of) and four integers per
//!   entry, verdict first, negative when refused (a one-integer reply is that verdict, the
//!   other three 0). The row's [`Reply`] turns an entry's four into a [`Decision`]: read as
//!   they are, or for GCRA through the Rust rule itself (`tollgate::rules::Gcra`) on the state
//!   the integer gives — the same answer in both of GCRA's compositions, computed once, in
//!   Rust, so the Lua does not repeat the rule's arithmetic;
//! - **Lua**: `lua/check.lua` dispatches on the tag and treats every function alike (same
//!   arguments, verdict first); GCRA's row wraps its body into a function of that shape.
//!
//! The algorithm files stay separate (each mirrors one `tollgate::rules` file and opens with
//! its contract); only what Redis runs is composed.

mod batch;
mod decode;
mod invocation;
mod op;
mod part;
mod port;
mod reply;
mod script_call;
#[cfg(test)]
mod test_support;
mod time_source;

pub(crate) use batch::{batch_invocation, split_batch};
pub(crate) use decode::decode;
pub(crate) use invocation::invocation;
#[cfg(feature = "bench")]
pub(crate) use invocation::old_gcra_invocation;
pub(crate) use op::Op;
pub(crate) use part::Part;
pub(crate) use port::{PACE_SCRIPT, all_scripts, pace_params};
pub use script_call::ScriptCall;
pub(crate) use time_source::TimeSource;
