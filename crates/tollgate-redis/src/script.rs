//! The Lua scripts: their source (the `lua/` files composed), their arguments, and the
//! decoding of their reply into typed decisions — in one place, so no caller indexes a reply.
//!
//! Compositions of the same files:
//! - **the general script** — prelude, all five algorithm files, the dispatcher — decides N
//!   entries of any algorithms all or nothing. A request may combine limits of different
//!   algorithms, and all-or-nothing over them needs one atomic step.
//! - **one single-entry script per algorithm** — prelude, that algorithm's file,
//!   `lua/one.lua` — for requests of one limit, the common case: Redis then builds one
//!   algorithm's closure per call instead of five and nothing dispatches.
//! - **GCRA's single-entry script** is leaner still: `lua/one_gcra.lua` binds two arguments,
//!   then `lua/gcra.lua`, a function *body* (the general script wraps the same text in a
//!   function), runs with no closure, no `TIME` (on the server's clock its state is the key's
//!   expiry) and answers one integer. Measured in `docs/benchmarks.md`: about half the Redis
//!   CPU of the general shape.
//!
//! The algorithm files stay separate (each mirrors one `tollgate::rules` file and opens with
//! its contract); only what Redis runs is composed.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, ScriptInvocation, Value};
use smallvec::SmallVec;
use tollgate::rules::{Gcra, GcraState, Rule};
use tollgate::{Algorithm, Decision, Entry, Limit, StoreError, Timestamp};

const PRELUDE: &str = include_str!("../lua/prelude.lua");
const FIXED_WINDOW: &str = include_str!("../lua/fixed_window.lua");
const SLIDING_LOG: &str = include_str!("../lua/sliding_log.lua");
const SLIDING_WINDOW: &str = include_str!("../lua/sliding_window.lua");
const TOKEN_BUCKET: &str = include_str!("../lua/token_bucket.lua");
const GCRA: &str = include_str!("../lua/gcra.lua");
const CHECK: &str = include_str!("../lua/check.lua");
const ONE: &str = include_str!("../lua/one.lua");
const ONE_GCRA: &str = include_str!("../lua/one_gcra.lua");

/// `lua/gcra.lua` (a body) as the function the general script calls.
static GCRA_FUNCTION: LazyLock<String> =
    LazyLock::new(|| format!("local function gcra(key, now, inc, tau, op)\n{GCRA}end\n"));

/// Each algorithm's function definition and its name, in [`Algorithm::ALL`] order.
static ALGORITHMS: LazyLock<[(&str, &str); 5]> = LazyLock::new(|| {
    [
        (FIXED_WINDOW, "fixed_window"),
        (SLIDING_LOG, "sliding_log"),
        (SLIDING_WINDOW, "sliding_window"),
        (TOKEN_BUCKET, "token_bucket"),
        (GCRA_FUNCTION.as_str(), "gcra"),
    ]
});

static SOURCE: LazyLock<String> = LazyLock::new(|| {
    let mut parts = vec![PRELUDE];
    parts.extend(ALGORITHMS.iter().map(|(file, _)| *file));
    parts.push(CHECK);
    parts.join("\n")
});

static ONE_SOURCES: LazyLock<[String; 5]> = LazyLock::new(|| {
    ALGORITHMS.map(|(file, function)| {
        if function == "gcra" {
            format!("{ONE_GCRA}{GCRA}")
        } else {
            format!("{PRELUDE}\n{file}\nlocal algorithm = {function}\n{ONE}")
        }
    })
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

/// The `ARGV` of the single-entry script of `limit` for a check of `cost` on the server's
/// clock — what the store sends for `Limiter::check` — for running the script by hand
/// (`redis-cli`, `redis-benchmark`), where a wrong argument would go unnoticed.
///
/// ```
/// use tollgate::{Algorithm, Limit, Quota};
/// let gcra = Limit::new("g", Algorithm::Gcra, Quota::per_second(3)?)?;
/// // inc = cost × ceil(1 s / 3) µs, tau = 3 intervals.
/// assert_eq!(tollgate_redis::single_entry_args(&gcra, 2), ["666668", "1000002"]);
/// let fw = Limit::new("f", Algorithm::FixedWindow, Quota::per_second(3)?)?;
/// // op (check), clock ('' = the server's), cost, then the entry's four (see `entry_args`).
/// assert_eq!(tollgate_redis::single_entry_args(&fw, 1), ["1", "", "1", "fw", "3", "1000000", "0"]);
/// # Ok::<(), tollgate::LimitError>(())
/// ```
pub fn single_entry_args(limit: &Limit, cost: u64) -> Vec<String> {
    let (tag, a, b, c) = entry_args(limit);
    if limit.algorithm() == Algorithm::Gcra {
        return vec![(cost * a).to_string(), b.to_string()];
    }
    vec![
        (Op::Check as u8).to_string(),
        String::new(),
        cost.to_string(),
        tag.to_owned(),
        a.to_string(),
        b.to_string(),
        c.to_string(),
    ]
}

/// A single-entry script as the store runs it for a check of `cost` units on the server's
/// clock: its text, SHA and `ARGV`. Not part of the API: for the benchmark and the tests, which
/// run the script by hand (`redis-cli`, `redis-benchmark`, `MULTI`), where a wrong argument
/// would go unnoticed.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ScriptCall {
    /// The script's full text (load it exactly, final newline included, or the SHA differs).
    pub source: &'static str,
    /// Its SHA1, as `EVALSHA` takes it.
    pub sha: &'static str,
    /// Its `ARGV`.
    pub args: Vec<String>,
}

impl ScriptCall {
    /// The call a one-limit check of `cost` on `limit` makes, on the server's clock.
    pub fn check(limit: &Limit, cost: u64) -> ScriptCall {
        let algorithm = limit.algorithm();
        ScriptCall {
            source: single_entry_script_source(algorithm),
            sha: single_entry_script_sha(algorithm),
            args: single_entry_args(limit, cost),
        }
    }
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

/// Which clock a script decides on (`ARGV[2]`, see `lua/prelude.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeSource {
    /// The server's clock, read by the script.
    Server,
    /// The server's clock at this instant (µs), read by an earlier script of the same
    /// request: a give-back undoes at the instant it charged.
    ServerInstant(u64),
    /// The caller's clock at this instant (µs).
    Caller(u64),
}

impl TimeSource {
    fn arg(self) -> String {
        match self {
            TimeSource::Server => String::new(),
            TimeSource::ServerInstant(now) => format!("s{now}"),
            TimeSource::Caller(now) => now.to_string(),
        }
    }
}

/// The invocation for `entries` (all in one slot on a cluster).
pub(crate) fn invocation<'e>(
    op: Op,
    entries: &[&'e Entry<'e>],
    cost: u64,
    at: TimeSource,
) -> ScriptInvocation<'static> {
    if let [one] = entries
        && one.limit.algorithm() == Algorithm::Gcra
    {
        // `lua/one_gcra.lua`: inc, tau, then op and clock only when not a check on the
        // server's clock (every argument costs Redis a string to build and parse).
        let (_, t, tau, _) = entry_args(one.limit);
        let mut inv = ONE_SCRIPTS[index(Algorithm::Gcra)].prepare_invoke();
        inv.key(one.key.as_str()).arg(cost * t).arg(tau);
        if op != Op::Check || at != TimeSource::Server {
            inv.arg(op as u8).arg(at.arg());
        }
        return inv;
    }
    let mut inv = match entries {
        [one] => ONE_SCRIPTS[index(one.limit.algorithm())].prepare_invoke(),
        _ => SCRIPT.prepare_invoke(),
    };
    inv.arg(op as u8).arg(at.arg()).arg(cost);
    for e in entries {
        let (tag, a, b, c) = entry_args(e.limit);
        inv.key(e.key.as_str()).arg(tag).arg(a).arg(b).arg(c);
    }
    inv
}

/// Decodes a script's reply for `entries` at `cost` into the instant the script used (none
/// for GCRA's single-entry script, which reads no clock on the server's) and one decision per
/// entry: `{ now, (allowed, remaining, reset_after_us, retry_after_us) × n }`, or GCRA's one
/// integer.
///
/// # Errors
/// [`StoreError::Protocol`] for any other shape.
pub(crate) fn decode(
    reply: Value,
    entries: &[&Entry<'_>],
    cost: u64,
) -> Result<(Option<u64>, SmallVec<[Decision; 2]>), StoreError> {
    if let [one] = entries
        && one.limit.algorithm() == Algorithm::Gcra
    {
        let Value::Int(r) = reply else {
            return Err(StoreError::Protocol(format!(
                "script reply: expected an integer, got {reply:?}"
            )));
        };
        return Ok((
            None,
            SmallVec::from_elem(decode_gcra(one.limit, cost, r)?, 1),
        ));
    }
    let (now, decisions) = decode_general(reply, entries.iter().copied())?;
    Ok((Some(now), decisions))
}

/// Decodes GCRA's one integer (`lua/gcra.lua`): the key's `tat − now` after an admitted call
/// or, as −1 − it, before a denied one. The decision then comes from the Rust rule itself, on
/// that state at now = 0, so the numbers are the memory store's by construction. A reply the
/// rule contradicts is a protocol error.
fn decode_gcra(limit: &Limit, cost: u64, reply: i64) -> Result<Decision, StoreError> {
    let allowed = reply >= 0;
    let used = if allowed { reply } else { -1 - reply };
    let state = GcraState {
        tat: used.unsigned_abs(),
    };
    // What the rule says of that state: for a denial, the decision itself; for an admit (the
    // state after it), the same numbers without a wait.
    let ruled = Gcra::new(limit.quota()).peek(&state, Timestamp::from_micros(0), cost);
    let (_, _, tau, _) = entry_args(limit);
    if (allowed && state.tat > tau) || (!allowed && ruled.allowed) {
        return Err(StoreError::Protocol(format!(
            "script reply: GCRA {reply} contradicts the rule (cost {cost}, tau {tau} µs)"
        )));
    }
    Ok(Decision {
        allowed,
        retry_after: if allowed { None } else { ruled.retry_after },
        ..ruled
    })
}

/// Decodes the general shape `{ now, (allowed, remaining, reset_after_us, retry_after_us) × n }`.
fn decode_general<'e>(
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
            if a == Algorithm::Gcra {
                // GCRA's: the arguments bound, then the body; no function at all.
                assert_eq!(defined, 0, "{a}: {defined} functions");
                assert!(one.starts_with(ONE_GCRA) && one.ends_with(GCRA));
            } else {
                // fmt, ttl_ms and clock from the prelude, and the algorithm's own function.
                assert_eq!(defined, 4, "{a}: {defined} functions");
                assert!(one.contains(&format!("local algorithm = {}", ALGORITHMS[index(a)].1)));
            }
            assert_ne!(single_entry_script_sha(a), script_sha());
        }
        // The general script holds GCRA's body once, as a function.
        assert_eq!(script_source().matches(GCRA).count(), 1);
        assert!(script_source().contains("local function gcra(key, now, inc, tau, op)\n"));
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
            let err = decode_general(reply.clone(), entries.iter()).expect_err("malformed");
            assert!(matches!(err, StoreError::Protocol(_)), "{reply:?}: {err}");
        }
        let ok = Value::Array(vec![
            Value::Int(7),
            Value::Int(0),
            Value::Int(3),
            Value::Int(10),
            Value::Int(25),
        ]);
        let (now, d) = decode_general(ok, entries.iter()).expect("well formed");
        assert_eq!(now, 7);
        assert!(!d[0].allowed);
        assert_eq!(d[0].limit, 5);
        assert_eq!(d[0].retry_after, Some(Duration::from_micros(25)));
    }

    /// GCRA's one integer becomes the decision the Rust rule gives for that state; a reply the
    /// rule contradicts, or of another shape, is a protocol error.
    #[test]
    fn gcra_integer_replies() {
        // 5 per second: T = 200 000 µs, tau = 1 s.
        let limit =
            Limit::new("g", Algorithm::Gcra, Quota::per_second(5).expect("valid")).expect("valid");
        let entry = Entry {
            key: Key::new(&Namespace::default(), &limit, &[("u", "1")]),
            limit: &limit,
        };
        let one = [&entry];
        let decide =
            |reply: Value, cost: u64| decode(reply, &one, cost).map(|(now, d)| (now, d[0]));
        // Admitted, 2 units now used: 3 left, full again in 400 ms.
        let (now, d) = decide(Value::Int(400_000), 1).expect("valid");
        assert_eq!(now, None);
        assert_eq!(
            d,
            Decision {
                allowed: true,
                limit: 5,
                remaining: 3,
                reset_after: Duration::from_millis(400),
                retry_after: None,
            }
        );
        // Denied with 900 ms used: cost 1 needs 100 ms more, cost 2 needs 300 ms.
        for (cost, retry) in [(1, 100), (2, 300)] {
            let (_, d) = decide(Value::Int(-1 - 900_000), cost).expect("valid");
            assert!(!d.allowed);
            assert_eq!(d.remaining, 0);
            assert_eq!(d.reset_after, Duration::from_millis(900));
            assert_eq!(
                d.retry_after,
                Some(Duration::from_millis(retry)),
                "cost {cost}"
            );
        }
        // Contradictions: "denied" with room for the cost; "admitted" past tau; other shapes.
        for (reply, cost) in [
            (Value::Int(-1), 1),
            (Value::Int(-1 - 700_000), 1),
            (Value::Int(1_000_001), 1),
            (Value::Array(vec![Value::Int(1)]), 1),
            (Value::Nil, 1),
        ] {
            let err = decide(reply.clone(), cost).expect_err("malformed");
            assert!(matches!(err, StoreError::Protocol(_)), "{reply:?}: {err}");
        }
    }
}
