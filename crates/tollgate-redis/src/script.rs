//! The Lua scripts: their source (the `lua/` files composed), their arguments, and the
//! decoding of their reply into typed decisions — in one place, so no caller indexes a reply.
//!
//! Two compositions of the same files, with one contract (`lua/check.lua`):
//! - **the general script** — prelude, all five algorithm files, the dispatcher — decides N
//!   entries of any algorithms all or nothing. A request may combine limits of different
//!   algorithms, and all-or-nothing over them needs one atomic step.
//! - **one single-entry script per algorithm** — prelude, that algorithm's file,
//!   `lua/one.lua` — for requests of one limit, the common case: Redis then builds one
//!   algorithm's closure per call instead of five and nothing dispatches (measured: about a
//!   fifth less Redis CPU per call for GCRA).
//!
//! The algorithm files stay separate (each mirrors one `tollgate::rules` file and opens with
//! its contract); only what Redis runs is composed. The arguments and the reply are the same
//! for both, so one encoder and one decoder serve both.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, ScriptInvocation, Value};
use smallvec::SmallVec;
use tollgate::{Algorithm, Decision, Entry, Limit, StoreError};

const PRELUDE: &str = include_str!("../lua/prelude.lua");
const FIXED_WINDOW: &str = include_str!("../lua/fixed_window.lua");
const SLIDING_LOG: &str = include_str!("../lua/sliding_log.lua");
const SLIDING_WINDOW: &str = include_str!("../lua/sliding_window.lua");
const TOKEN_BUCKET: &str = include_str!("../lua/token_bucket.lua");
const GCRA: &str = include_str!("../lua/gcra.lua");
const CHECK: &str = include_str!("../lua/check.lua");
const ONE: &str = include_str!("../lua/one.lua");

/// Each algorithm's file and the name of the function it defines, in [`Algorithm::ALL`] order.
const ALGORITHMS: [(&str, &str); 5] = [
    (FIXED_WINDOW, "fixed_window"),
    (SLIDING_LOG, "sliding_log"),
    (SLIDING_WINDOW, "sliding_window"),
    (TOKEN_BUCKET, "token_bucket"),
    (GCRA, "gcra"),
];

static SOURCE: LazyLock<String> = LazyLock::new(|| {
    let mut parts = vec![PRELUDE];
    parts.extend(ALGORITHMS.iter().map(|(file, _)| *file));
    parts.push(CHECK);
    parts.join("\n")
});

static ONE_SOURCES: LazyLock<[String; 5]> = LazyLock::new(|| {
    ALGORITHMS
        .map(|(file, function)| format!("{PRELUDE}\n{file}\nlocal algorithm = {function}\n{ONE}"))
});

/// The general script, loaded once per process; `invoke_async` sends EVALSHA and loads the
/// script when a node answers NOSCRIPT (after a restart or `SCRIPT FLUSH`, on any cluster
/// node).
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&SOURCE));

/// The single-entry scripts, in [`Algorithm::ALL`] order.
static ONE_SCRIPTS: LazyLock<[Script; 5]> =
    LazyLock::new(|| [0, 1, 2, 3, 4].map(|i| Script::new(&ONE_SOURCES[i])));

fn index(algorithm: Algorithm) -> usize {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingLog => 1,
        Algorithm::SlidingWindow { .. } => 2,
        Algorithm::TokenBucket => 3,
        Algorithm::Gcra => 4,
    }
}

/// The full text of the general script (for benchmarks and `SCRIPT LOAD` by hand: load it
/// exactly, with its final newline, or the SHA differs).
pub fn script_source() -> &'static str {
    &SOURCE
}

/// The SHA1 of [`script_source`], as `EVALSHA` takes it.
pub fn script_sha() -> &'static str {
    SCRIPT.get_hash()
}

/// The full text of the single-entry script of `algorithm` (what a one-limit request runs).
pub fn single_entry_script_source(algorithm: Algorithm) -> &'static str {
    &ONE_SOURCES[index(algorithm)]
}

/// The SHA1 of [`single_entry_script_source`].
pub fn single_entry_script_sha(algorithm: Algorithm) -> &'static str {
    ONE_SCRIPTS[index(algorithm)].get_hash()
}

/// What the script does with the entries (`ARGV[1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Decide, write nothing.
    Peek = 0,
    /// Decide, and charge every entry if all admit.
    Check = 1,
    /// Give back `cost` charged at `now` (undo of a cross-slot check).
    GiveBack = 2,
}

/// The four `ARGV` values of one entry of `limit`: its algorithm tag and three integer
/// parameters, as the Lua functions take them (see `lua/check.lua`). Public for running the
/// script by hand (`redis-cli`, `redis-benchmark`), where a wrong argument would go unnoticed.
///
/// ```
/// use tollgate::{Algorithm, Limit, Quota};
/// let l = Limit::new("g", Algorithm::Gcra, Quota::per_second(3)?)?;
/// // Emission interval ceil(1 s / 3) = 333 334 µs, tau = 3 intervals.
/// assert_eq!(tollgate_redis::entry_args(&l), ("gcra", 333_334, 1_000_002, 0));
/// # Ok::<(), tollgate::LimitError>(())
/// ```
pub fn entry_args(limit: &Limit) -> (&'static str, u64, u64, u64) {
    let quota = limit.quota();
    let t = quota.emission_interval_micros();
    match limit.algorithm() {
        Algorithm::FixedWindow => ("fw", quota.limit(), quota.period_micros(), 0),
        Algorithm::SlidingLog => ("sl", quota.limit(), quota.period_micros(), 0),
        Algorithm::SlidingWindow { buckets } => {
            let buckets = u64::from(buckets.max(1));
            (
                "sw",
                quota.limit(),
                quota.period_micros().div_ceil(buckets),
                buckets,
            )
        }
        Algorithm::TokenBucket => ("tb", quota.burst(), t, 0),
        Algorithm::Gcra => ("gcra", t, t * quota.burst(), 0),
    }
}

/// The invocation for `entries` (all in one slot on a cluster).
pub(crate) fn invocation<'e>(
    op: Op,
    entries: &[&'e Entry<'e>],
    cost: u64,
    now: Option<u64>,
) -> ScriptInvocation<'static> {
    let mut inv = match entries {
        [one] => ONE_SCRIPTS[index(one.limit.algorithm())].prepare_invoke(),
        _ => SCRIPT.prepare_invoke(),
    };
    inv.arg(op as u8);
    match now {
        Some(now) => inv.arg(now),
        None => inv.arg(""),
    };
    inv.arg(cost);
    for e in entries {
        let (tag, a, b, c) = entry_args(e.limit);
        inv.key(e.key.as_str()).arg(tag).arg(a).arg(b).arg(c);
    }
    inv
}

/// Decodes `{ now, (allowed, remaining, reset_after_us, retry_after_us) × n }` into the
/// instant the script used and one decision per entry.
///
/// # Errors
/// [`StoreError::Protocol`] for any other shape.
pub(crate) fn decode<'e>(
    reply: Value,
    entries: impl ExactSizeIterator<Item = &'e Entry<'e>>,
) -> Result<(u64, SmallVec<[Decision; 2]>), StoreError> {
    let bad = |what: &str| StoreError::Protocol(format!("script reply: {what}"));
    let Value::Array(items) = reply else {
        return Err(bad(&format!("expected an array, got {reply:?}")));
    };
    let n = entries.len();
    if items.len() != 1 + 4 * n {
        return Err(bad(&format!(
            "expected {} integers for {n} entries, got {}",
            1 + 4 * n,
            items.len()
        )));
    }
    let mut ints = Vec::with_capacity(items.len());
    for v in items {
        match v {
            Value::Int(i) => ints.push(i),
            other => return Err(bad(&format!("expected an integer, got {other:?}"))),
        }
    }
    let unsigned =
        |i: i64, what: &str| u64::try_from(i).map_err(|_| bad(&format!("negative {what}: {i}")));
    let now = unsigned(ints[0], "now")?;
    let mut decisions = SmallVec::with_capacity(n);
    for (e, chunk) in entries.zip(ints[1..].chunks_exact(4)) {
        let allowed = match chunk[0] {
            1 => true,
            0 => false,
            other => return Err(bad(&format!("allowed flag {other}"))),
        };
        let retry_after = if allowed {
            None
        } else {
            Some(Duration::from_micros(unsigned(chunk[3], "retry_after")?))
        };
        decisions.push(Decision {
            allowed,
            limit: e.limit.quota().limit(),
            remaining: unsigned(chunk[1], "remaining")?,
            reset_after: Duration::from_micros(unsigned(chunk[2], "reset_after")?),
            retry_after,
        });
    }
    Ok((now, decisions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Key, Namespace, Quota};

    /// Every algorithm file is part of the script, and the contract header of each is there.
    #[test]
    fn script_holds_every_algorithm() {
        for f in [
            "local function fixed_window(",
            "local function sliding_log(",
            "local function sliding_window(",
            "local function token_bucket(",
            "local function gcra(",
            "-- KEYS[1..N]",
        ] {
            assert!(script_source().contains(f), "missing {f}");
        }
        assert_eq!(script_sha().len(), 40);
        for a in Algorithm::ALL {
            let one = single_entry_script_source(a);
            let defined = one.matches("local function ").count();
            // fmt and ttl_ms from the prelude, and the algorithm's own function.
            assert_eq!(defined, 3, "{a}: {defined} functions");
            assert!(one.contains(&format!("local algorithm = {}", ALGORITHMS[index(a)].1)));
            assert_ne!(single_entry_script_sha(a), script_sha());
        }
    }

    /// A reply of the wrong shape is a protocol error, never a panic or a wrong decision.
    #[test]
    fn malformed_replies_are_protocol_errors() {
        let limit =
            Limit::new("g", Algorithm::Gcra, Quota::per_second(5).expect("valid")).expect("valid");
        let entry = Entry {
            key: Key::new(&Namespace::default(), &limit, &[("u", "1")]),
            limit: &limit,
        };
        let entries = [entry];
        let cases = [
            Value::Int(1),
            Value::Array(vec![Value::Int(1), Value::Int(1)]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(2),
                Value::Int(0),
                Value::Int(0),
                Value::Int(-1),
            ]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
                Value::Int(-5),
            ]),
        ];
        for reply in cases {
            let err = decode(reply.clone(), entries.iter()).expect_err("malformed");
            assert!(matches!(err, StoreError::Protocol(_)), "{reply:?}: {err}");
        }
        let ok = Value::Array(vec![
            Value::Int(7),
            Value::Int(0),
            Value::Int(3),
            Value::Int(10),
            Value::Int(25),
        ]);
        let (now, d) = decode(ok, entries.iter()).expect("well formed");
        assert_eq!(now, 7);
        assert!(!d[0].allowed);
        assert_eq!(d[0].limit, 5);
        assert_eq!(d[0].retry_after, Some(Duration::from_micros(25)));
    }
}
