//! [`PORTS`]: one row per algorithm, the one place that says how the algorithms' scripts
//! differ (see the parent module), and the scripts composed from the `lua/` files.

use std::sync::LazyLock;

use redis::Script;
use smallvec::SmallVec;
use tollgate::{Algorithm, Limit};

use super::reply::Reply;

const PRELUDE: &str = include_str!("../../lua/prelude.lua");
const FIXED_WINDOW: &str = include_str!("../../lua/fixed_window.lua");
const SLIDING_LOG: &str = include_str!("../../lua/sliding_log.lua");
const SLIDING_WINDOW: &str = include_str!("../../lua/sliding_window.lua");
const TOKEN_BUCKET: &str = include_str!("../../lua/token_bucket.lua");
pub(super) const GCRA: &str = include_str!("../../lua/gcra.lua");
const REQUEST: &str = include_str!("../../lua/request.lua");
const CHECK: &str = include_str!("../../lua/check.lua");
const BATCH: &str = include_str!("../../lua/batch.lua");
const ONE: &str = include_str!("../../lua/one.lua");
const ONE_GCRA: &str = include_str!("../../lua/one_gcra.lua");
const BATCH_GCRA: &str = include_str!("../../lua/batch_gcra.lua");
const PACE: &str = include_str!("../../lua/pace.lua");

/// One algorithm on Redis: everything that differs between algorithms, in one row.
pub(super) struct Port {
    /// Its tag in the general script's `ARGV` (`lua/check.lua`).
    pub(super) tag: &'static str,
    /// The three integer parameters of a limit, as its Lua function takes them (see its
    /// `lua/<algorithm>.lua`).
    pub(super) params: fn(&Limit) -> [u64; 3],
    /// Its function's definition in the general script.
    pub(super) function: String,
    /// Its single-entry script's text.
    pub(super) single_source: String,
    /// Its single-entry script.
    pub(super) single: Script,
    /// Its single-entry script's arguments for a cost, before op and clock.
    pub(super) single_args: fn(cost: u64, params: [u64; 3]) -> SmallVec<[u64; 4]>,
    /// Its lone-check batch script, if it has one: several requests, each one check of one
    /// key of this algorithm, each taking its single-entry arguments and answering as its
    /// single-entry script does (see [`batch_invocation`]).
    pub(super) lone_batch: Option<Script>,
    /// What its scripts answer.
    pub(super) reply: Reply,
}

impl Port {
    fn new(
        tag: &'static str,
        params: fn(&Limit) -> [u64; 3],
        function: String,
        single_source: String,
        single_args: fn(u64, [u64; 3]) -> SmallVec<[u64; 4]>,
        reply: Reply,
    ) -> Port {
        let single = Script::new(&single_source);
        Port {
            tag,
            params,
            function,
            single_source,
            single,
            single_args,
            lone_batch: None,
            reply,
        }
    }

    /// The row with a lone-check batch script of this source.
    fn with_lone_batch(self, source: &str) -> Port {
        Port {
            lone_batch: Some(Script::new(source)),
            ..self
        }
    }

    /// A row whose Lua defines `function` and answers a decision; its single-entry script is
    /// the prelude, the file and `lua/one.lua`, taking cost and the three parameters.
    fn deciding(
        tag: &'static str,
        params: fn(&Limit) -> [u64; 3],
        file: &str,
        function: &str,
    ) -> Port {
        Port::new(
            tag,
            params,
            file.to_owned(),
            format!("{PRELUDE}\n{file}\nlocal algorithm = {function}\n{ONE}"),
            |cost, [a, b, c]| SmallVec::from_slice(&[cost, a, b, c]),
            Reply::Decision,
        )
    }
}

/// Every algorithm's row, in [`Algorithm::ALL`] order. GCRA's is the one place that knows it
/// differs: its body is wrapped into the function shape every algorithm has (binding
/// inc = cost × T, and no `now` on the server's clock, where its state is the key's expiry),
/// its single-entry script is that body after `lua/one_gcra.lua` taking inc, tau and whether
/// T is a whole number of ms, and its answer goes through the Rust rule.
pub(super) static PORTS: LazyLock<[Port; 5]> = LazyLock::new(|| {
    [
        Port::deciding("fw", window, FIXED_WINDOW, "fixed_window"),
        Port::deciding("sl", window, SLIDING_LOG, "sliding_log"),
        Port::deciding(
            "sw",
            |l| {
                let buckets = match l.algorithm() {
                    Algorithm::SlidingWindow { buckets } => u64::from(buckets.max(1)),
                    _ => 1,
                };
                let q = l.quota();
                [q.limit(), q.period_micros().div_ceil(buckets), buckets]
            },
            SLIDING_WINDOW,
            "sliding_window",
        ),
        Port::deciding(
            "tb",
            |l| [l.quota().burst(), l.quota().emission_interval_micros(), 0],
            TOKEN_BUCKET,
            "token_bucket",
        ),
        Port::new(
            "gcra",
            |l| {
                let t = l.quota().emission_interval_micros();
                [t, t * l.quota().burst(), 0]
            },
            format!(
                "local last_ms, last_px\n\
                 local function gcra(key, now, cost, t, tau, whole, op, server)\n\
                 local inc = cost * t\n\
                 local at\n\
                 if server then if op == 2 then at = now end now = nil end\n\
                 {GCRA}end\n"
            ),
            format!("{ONE_GCRA}{GCRA}"),
            |cost, [t, tau, _]| SmallVec::from_slice(&[cost * t, tau, u64::from(t % 1000 == 0)]),
            Reply::GcraUsed,
        )
        .with_lone_batch(&format!(
            "local last_ms, last_px\nlocal function gcra(key, inc, tau, op, now, whole)\nlocal at\n{GCRA}end\n\
             {BATCH_GCRA}"
        )),
    ]
});

pub(super) fn port(algorithm: Algorithm) -> &'static Port {
    &PORTS[usize::from(port_index(algorithm))]
}

/// `algorithm`'s row in [`PORTS`].
pub(super) fn port_index(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingLog => 1,
        Algorithm::SlidingWindow { .. } => 2,
        Algorithm::TokenBucket => 3,
        Algorithm::Gcra => 4,
    }
}

/// The prelude, every algorithm's function and the dispatcher, then `main`.
fn general(main: &str) -> String {
    let mut parts = vec![PRELUDE];
    parts.extend(PORTS.iter().map(|p| p.function.as_str()));
    parts.push(REQUEST);
    parts.push(main);
    parts.join("\n")
}

pub(super) static SOURCE: LazyLock<String> = LazyLock::new(|| general(CHECK));

static BATCH_SOURCE: LazyLock<String> = LazyLock::new(|| general(BATCH));

/// The batch script: several requests in one call (`lua/batch.lua`).
pub(super) static BATCH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&BATCH_SOURCE));

/// The pacing script (`lua/pace.lua`): reservations, cancellations and settlements, over the
/// same algorithm functions as the general script.
pub(crate) static PACE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&general(PACE)));

/// The pacing script's tag and three parameters for `limit`: the general script's, except
/// GCRA's third, whether T is a whole number of ms (gcra.lua's `whole`).
pub(crate) fn pace_params(limit: &Limit) -> (&'static str, [u64; 3]) {
    let row = port(limit.algorithm());
    let mut params = (row.params)(limit);
    if limit.algorithm() == Algorithm::Gcra {
        params[2] = u64::from(params[0].is_multiple_of(1000));
    }
    (row.tag, params)
}

/// The general script, loaded once per process; `invoke_async` sends EVALSHA and loads the
/// script when a node answers NOSCRIPT (after a restart or `SCRIPT FLUSH`, on any cluster
/// node).
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&SOURCE));

/// The emission interval T (µs) in row `port`'s parameters, for the algorithms whose state is
/// a point in time (GCRA: `[t, tau, _]`, token bucket: `[burst, t, _]`); `None` for the
/// window algorithms.
pub(super) fn emission_interval(port: u8, params: [u64; 3]) -> Option<u64> {
    match PORTS[usize::from(port)].tag {
        "gcra" => Some(params[0]),
        "tb" => Some(params[1]),
        _ => None,
    }
}

/// The limit and the period (µs): a fixed window's and a sliding log's parameters.
fn window(limit: &Limit) -> [u64; 3] {
    [limit.quota().limit(), limit.quota().period_micros(), 0]
}

/// The three integer parameters of `limit`'s algorithm.
pub(super) fn params(limit: &Limit) -> [u64; 3] {
    (port(limit.algorithm()).params)(limit)
}

/// The arguments of `limit`'s single-entry script for `cost` units, before op and clock.
pub(super) fn single_args(limit: &Limit, cost: u64) -> SmallVec<[u64; 4]> {
    (port(limit.algorithm()).single_args)(cost, params(limit))
}

/// Every script a store may run: the general one and each algorithm's single-entry one, to
/// load once per connection (and once again after Redis lost them).
pub(crate) fn all_scripts() -> impl Iterator<Item = &'static Script> {
    [&*SCRIPT, &*BATCH_SCRIPT]
        .into_iter()
        .chain(PORTS.iter().map(|p| &p.single))
        .chain(PORTS.iter().filter_map(|p| p.lone_batch.as_ref()))
        .chain(std::iter::once(&*crate::lease::LEASE_SCRIPT))
        .chain(std::iter::once(&*PACE_SCRIPT))
        .chain(std::iter::once(&*crate::permissions::PERMISSIONS_SCRIPT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::script_call::ScriptCall;
    use crate::script::test_support::limit;

    /// Every algorithm's function is part of the general script, with the contract header of
    /// the dispatcher; each single-entry script holds its algorithm alone.
    #[test]
    fn scripts_hold_every_algorithm() {
        for f in [
            "local function fixed_window(",
            "local function sliding_log(",
            "local function sliding_window(",
            "local function token_bucket(",
            "local function gcra(key, now, cost, t, tau, whole, op, server)\n",
            "-- KEYS[1..N]",
        ] {
            assert!(SOURCE.contains(f), "missing {f}");
        }
        assert_eq!(SCRIPT.get_hash().len(), 40);
        for a in Algorithm::ALL {
            let call = ScriptCall::check(&limit(a, 3), 1);
            let defined = call.source.matches("local function ").count();
            // fmt, ttl_ms, may_expire, clock, late and start from the prelude, and the
            // algorithm's own function; GCRA's: the arguments bound, then the body, no
            // function at all.
            let expected = if a == Algorithm::Gcra { 0 } else { 7 };
            assert_eq!(defined, expected, "{a}: {defined} functions");
            assert_eq!(call.sha.len(), 40);
            assert_ne!(call.sha, SCRIPT.get_hash());
        }
        // The general script holds GCRA's body once, as a function.
        assert_eq!(SOURCE.matches(GCRA).count(), 1);
    }
}
