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
//!   `lua/request.lua` (coalesced calls, `src/coalesce.rs`).
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

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, Script, Value};
use smallvec::SmallVec;
use tollgate::rules::{Gcra, GcraState, Rule};
use tollgate::{
    Admission, Algorithm, Decision, Entry, Key, Limit, Need, NotUntil, StoreError, Timestamp,
};

const PRELUDE: &str = include_str!("../lua/prelude.lua");
const FIXED_WINDOW: &str = include_str!("../lua/fixed_window.lua");
const SLIDING_LOG: &str = include_str!("../lua/sliding_log.lua");
const SLIDING_WINDOW: &str = include_str!("../lua/sliding_window.lua");
const TOKEN_BUCKET: &str = include_str!("../lua/token_bucket.lua");
const GCRA: &str = include_str!("../lua/gcra.lua");
const REQUEST: &str = include_str!("../lua/request.lua");
const CHECK: &str = include_str!("../lua/check.lua");
const BATCH: &str = include_str!("../lua/batch.lua");
const ONE: &str = include_str!("../lua/one.lua");
const ONE_GCRA: &str = include_str!("../lua/one_gcra.lua");
const BATCH_GCRA: &str = include_str!("../lua/batch_gcra.lua");

/// How an algorithm's script answers for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// The decision itself: verdict (1 admitted, −1 refused), remaining units, reset_after
    /// (µs), retry_after (µs).
    Decision,
    /// GCRA's one integer (`lua/gcra.lua`): the key's `tat − now` after an admitted call or,
    /// as −1 − it, before a refused one; the decision comes from the Rust rule.
    GcraUsed,
}

/// One algorithm on Redis: everything that differs between algorithms, in one row.
struct Port {
    /// Its tag in the general script's `ARGV` (`lua/check.lua`).
    tag: &'static str,
    /// The three integer parameters of a limit, as its Lua function takes them (see its
    /// `lua/<algorithm>.lua`).
    params: fn(&Limit) -> [u64; 3],
    /// Its function's definition in the general script.
    function: String,
    /// Its single-entry script's text.
    single_source: String,
    /// Its single-entry script.
    single: Script,
    /// Its single-entry script's arguments for a cost, before op and clock.
    single_args: fn(cost: u64, params: [u64; 3]) -> SmallVec<[u64; 4]>,
    /// Its lone-check batch script, if it has one: several requests, each one check of one
    /// key of this algorithm, each taking its single-entry arguments and answering as its
    /// single-entry script does (see [`batch_invocation`]).
    lone_batch: Option<Script>,
    /// What its scripts answer.
    reply: Reply,
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
static PORTS: LazyLock<[Port; 5]> = LazyLock::new(|| {
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
                 if server then now = nil end\n\
                 {GCRA}end\n"
            ),
            format!("{ONE_GCRA}{GCRA}"),
            |cost, [t, tau, _]| SmallVec::from_slice(&[cost * t, tau, u64::from(t % 1000 == 0)]),
            Reply::GcraUsed,
        )
        .with_lone_batch(&format!(
            "local last_ms, last_px\nlocal function gcra(key, inc, tau, op, now, whole)\n{GCRA}end\n\
             {BATCH_GCRA}"
        )),
    ]
});

fn port(algorithm: Algorithm) -> &'static Port {
    &PORTS[usize::from(port_index(algorithm))]
}

/// `algorithm`'s row in [`PORTS`].
fn port_index(algorithm: Algorithm) -> u8 {
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

static SOURCE: LazyLock<String> = LazyLock::new(|| general(CHECK));

static BATCH_SOURCE: LazyLock<String> = LazyLock::new(|| general(BATCH));

/// The batch script: several requests in one call (`lua/batch.lua`).
static BATCH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&BATCH_SOURCE));

/// The general script, loaded once per process; `invoke_async` sends EVALSHA and loads the
/// script when a node answers NOSCRIPT (after a restart or `SCRIPT FLUSH`, on any cluster
/// node).
pub(crate) static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&SOURCE));

/// The limit and the period (µs): a fixed window's and a sliding log's parameters.
fn window(limit: &Limit) -> [u64; 3] {
    [limit.quota().limit(), limit.quota().period_micros(), 0]
}

/// The three integer parameters of `limit`'s algorithm.
fn params(limit: &Limit) -> [u64; 3] {
    (port(limit.algorithm()).params)(limit)
}

/// The arguments of `limit`'s single-entry script for `cost` units, before op and clock.
fn single_args(limit: &Limit, cost: u64) -> SmallVec<[u64; 4]> {
    (port(limit.algorithm()).single_args)(cost, params(limit))
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
        let port = port(limit.algorithm());
        ScriptCall {
            source: &port.single_source,
            sha: port.single.get_hash(),
            args: single_args(limit, cost)
                .iter()
                .map(u64::to_string)
                .collect(),
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

impl From<tollgate::Op> for Op {
    fn from(op: tollgate::Op) -> Op {
        match op {
            tollgate::Op::Check => Op::Check,
            tollgate::Op::Peek => Op::Peek,
        }
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

/// The `EVALSHA` of one request's share `part` (all in one slot on a cluster): its
/// algorithm's single-entry script for one entry, else the general script. A check with a
/// deadline (`deadline.rs`) sends the deadline where the op goes (a number above 2 is a
/// check with that deadline, `lua/check.lua`). Built here rather
/// than by `redis::Script::invoke_async`, which loads the script again on every `NOSCRIPT`: 64
/// calls in flight on a Redis that lost its scripts would send 64 loads. The store loads them
/// once per connection, and once per loss (`store.rs`).
pub(crate) fn invocation(part: &Part) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    if let ([key], [one]) = (&part.keys[..], &part.entries[..])
        && !part.needs_general()
    {
        let row = &PORTS[usize::from(one.port)];
        cmd.arg(row.single.get_hash()).arg(1).arg(key.as_str());
        for a in (row.single_args)(one.cost, one.params) {
            cmd.arg(a);
        }
        match (part.deadline, part.at) {
            (Some(deadline), TimeSource::Server) => {
                cmd.arg(deadline);
            }
            (Some(deadline), at) => {
                cmd.arg(deadline).arg(at.arg());
            }
            (None, TimeSource::Server) if part.op == Op::Check => {}
            (None, at) => {
                cmd.arg(part.op as u8).arg(at.arg());
            }
        }
        return cmd;
    }
    cmd.arg(SCRIPT.get_hash()).arg(part.keys.len());
    for k in &part.keys {
        cmd.arg(k.as_str());
    }
    match part.deadline {
        Some(deadline) => cmd.arg(deadline),
        None => cmd.arg(part.op as u8),
    };
    cmd.arg(part.at.arg());
    part.entry_args(&mut cmd);
    cmd
}

/// `part` as the single-entry GCRA script before the local tier took it (`sha`: key, inc,
/// tau; see `RedisStoreBuilder::old_gcra_script`), when `part` is one GCRA check on the
/// server's clock (a deadline is dropped: that script knows none); `None` otherwise.
#[cfg(feature = "bench")]
pub(crate) fn old_gcra_invocation(part: &Part, sha: &str) -> Option<Cmd> {
    let ([key], [one]) = (&part.keys[..], &part.entries[..]) else {
        return None;
    };
    if part.needs_general() {
        return None;
    }
    let row = &PORTS[usize::from(one.port)];
    if row.reply != Reply::GcraUsed || part.op != Op::Check || part.at != TimeSource::Server {
        return None;
    }
    let args = (row.single_args)(one.cost, one.params);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(1)
        .arg(key.as_str())
        .arg(args[0])
        .arg(args[1]);
    Some(cmd)
}

/// Every script a store may run: the general one and each algorithm's single-entry one, to
/// load once per connection (and once again after Redis lost them).
pub(crate) fn all_scripts() -> impl Iterator<Item = &'static Script> {
    [&*SCRIPT, &*BATCH_SCRIPT]
        .into_iter()
        .chain(PORTS.iter().map(|p| &p.single))
        .chain(PORTS.iter().filter_map(|p| p.lone_batch.as_ref()))
        .chain(std::iter::once(&*crate::lease::LEASE_SCRIPT))
        .chain(std::iter::once(&*crate::permissions::PERMISSIONS_SCRIPT))
}

/// One request's call, owned (a queued request waits while its caller's borrowed request
/// stays with the caller): op, clock, and each entry's key, row, cost and parameters. Sent as
/// its own call ([`invocation`]) or as a share of a batch ([`batch_invocation`]).
#[derive(Debug, Clone)]
pub(crate) struct Part {
    op: Op,
    at: TimeSource,
    /// A check's deadline, µs on the server's clock (`deadline.rs`).
    deadline: Option<u64>,
    keys: SmallVec<[Key; 2]>,
    entries: SmallVec<[PartEntry; 2]>,
    /// A check charges every entry whether it admits or not
    /// (`tollgate::Request::count_refusals`).
    counts_refusals: bool,
}

#[derive(Debug, Clone, Copy)]
struct PartEntry {
    port: u8,
    cost: u64,
    params: [u64; 3],
    /// What the request needs of it: its tag's mark (`lua/request.lua`).
    need: Need,
}

impl Part {
    /// `op` on `entries` (one slot on a cluster) on clock `at`; `counts_refusals` for a
    /// request that counts refusals.
    pub(crate) fn new(
        op: Op,
        entries: &[&Entry<'_>],
        at: TimeSource,
        counts_refusals: bool,
    ) -> Part {
        Part {
            op,
            at,
            deadline: None,
            keys: entries.iter().map(|e| e.key().clone()).collect(),
            entries: entries
                .iter()
                .map(|e| PartEntry {
                    port: port_index(e.limit().algorithm()),
                    cost: e.cost(),
                    params: params(e.limit()),
                    need: e.need(),
                })
                .collect(),
            counts_refusals,
        }
    }

    /// Whether this call needs the general script, whatever its size: a request that counts
    /// refusals (the single-entry scripts do not count).
    fn needs_general(&self) -> bool {
        self.counts_refusals && self.op == Op::Check
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The give-back that undoes this check, when `reply` (its own call's reply, or its share
    /// of a batch's) says it charged: of every entry that admitted when the request was
    /// admitted (`Need::admits`: every entry, unless entries need less), of every entry when
    /// the request counts refusals. `None` for a peek, a give-back, a refusal, a late answer
    /// (`deadline.rs`: nothing charged) or a reply of another shape. Its clock is the instant
    /// the check decided at, as for a cross-slot undo.
    pub(crate) fn undo_of(&self, reply: &Value) -> Option<Part> {
        if self.op != Op::Check {
            return None;
        }
        let (now, answers): (Option<i64>, &[Value]) = match reply {
            Value::Int(_) if self.entries.len() == 1 => (None, std::slice::from_ref(reply)),
            Value::Array(items) => match items.split_first() {
                Some((Value::Int(now), rest)) => (Some(*now), rest),
                _ => return None,
            },
            _ => return None,
        };
        let mut rest = answers;
        let mut admits: SmallVec<[bool; 2]> = SmallVec::new();
        for e in &self.entries {
            let row = &PORTS[usize::from(e.port)];
            let width = reply_width(row.reply);
            if rest.len() < width {
                return None;
            }
            let admitted = match (row.reply, &rest[0]) {
                (Reply::GcraUsed, Value::Int(v)) => *v >= 0,
                (Reply::Decision, Value::Int(v)) => *v == 1,
                _ => return None,
            };
            admits.push(admitted || self.counts_refusals);
            rest = &rest[width..];
        }
        if !Need::admits(
            self.entries
                .iter()
                .map(|e| e.need)
                .zip(admits.iter().copied()),
        ) {
            return None;
        }
        let charged = |i: &usize| admits[*i];
        let kept: SmallVec<[usize; 2]> = (0..self.entries.len()).filter(charged).collect();
        if kept.is_empty() {
            return None;
        }
        let at = match (self.at, now) {
            (TimeSource::Caller(t), _) => TimeSource::Caller(t),
            (_, Some(t)) => TimeSource::ServerInstant(u64::try_from(t).ok()?),
            (at, None) => at,
        };
        Some(Part {
            op: Op::GiveBack,
            at,
            deadline: None,
            keys: kept.iter().map(|&i| self.keys[i].clone()).collect(),
            entries: kept
                .iter()
                .map(|&i| PartEntry {
                    need: Need::Must,
                    ..self.entries[i]
                })
                .collect(),
            counts_refusals: false,
        })
    }

    /// Whether this call may charge (a check): a peek or a give-back has nothing to undo.
    pub(crate) fn charges(&self) -> bool {
        self.op == Op::Check
    }

    /// Sets the deadline of a check (`deadline.rs`); a peek or a give-back takes none.
    pub(crate) fn set_deadline(&mut self, deadline: Option<u64>) {
        self.deadline = deadline.filter(|_| self.op == Op::Check);
    }

    /// Each entry's tag and arguments, as `lua/request.lua` reads them: the row's
    /// single-entry arguments (GCRA: inc, tau and whole; the others: cost and three parameters).
    fn entry_args(&self, cmd: &mut Cmd) {
        for e in &self.entries {
            let row = &PORTS[usize::from(e.port)];
            let mark = match e.need {
                _ if self.counts_refusals => "+",
                Need::Must => "",
                Need::OneOf => "?",
                Need::Optional => "~",
            };
            if mark.is_empty() {
                cmd.arg(row.tag);
            } else {
                cmd.arg(format!("{mark}{}", row.tag));
            }
            for a in (row.single_args)(e.cost, e.params) {
                cmd.arg(a);
            }
        }
    }

    /// Integers its reply holds after `now`: one per GCRA entry, four per other entry.
    fn reply_len(&self) -> usize {
        self.entries
            .iter()
            .map(|e| reply_width(PORTS[usize::from(e.port)].reply))
            .sum()
    }
}

/// Integers one entry's answer takes in a general or batch reply.
fn reply_width(reply: Reply) -> usize {
    match reply {
        Reply::Decision => 4,
        Reply::GcraUsed => 1,
    }
}

/// The `EVALSHA` of the batch script for `parts`: the lone-check batch script of their
/// algorithm when [`lone_batch`] finds one, else `lua/batch.lua` with every part's keys, then
/// per part a header (op, or 3 for a check with a deadline; whether a clock follows; entry
/// count), the clock unless it is the server's, the deadline if any, and its entries.
pub(crate) fn batch_invocation(parts: &[&Part]) -> Cmd {
    if let Some((row, script, caller)) = lone_batch(parts) {
        return lone_batch_invocation(row, script, caller, parts);
    }
    let mut cmd = redis::cmd("EVALSHA");
    let keys: usize = parts.iter().map(|p| p.len()).sum();
    cmd.arg(BATCH_SCRIPT.get_hash()).arg(keys);
    for p in parts {
        for k in &p.keys {
            cmd.arg(k.as_str());
        }
    }
    for p in parts {
        let clock = p.at != TimeSource::Server;
        let op = if p.deadline.is_some() {
            3
        } else {
            p.op as usize
        };
        cmd.arg(op + 4 * usize::from(clock) + 8 * p.len());
        if clock {
            cmd.arg(p.at.arg());
        }
        if let Some(deadline) = p.deadline {
            cmd.arg(deadline);
        }
        p.entry_args(&mut cmd);
    }
    cmd
}

/// When every part of `parts` is one check of one key of the same algorithm, that algorithm
/// has a lone-check batch script, and every part is on the server's clock (`false`) or every
/// one on the caller's (`true`): the algorithm's row, its script and which clock. The batch
/// then goes as that script ([`lone_batch_invocation`]), else as the general batch script.
fn lone_batch(parts: &[&Part]) -> Option<(&'static Port, &'static Script, bool)> {
    let first = parts.first()?;
    let caller = match first.at {
        TimeSource::Server => false,
        TimeSource::Caller(_) => true,
        TimeSource::ServerInstant(_) => return None,
    };
    let [entry] = first.entries[..] else {
        return None;
    };
    let row = &PORTS[usize::from(entry.port)];
    let script = row.lone_batch.as_ref()?;
    let alike = |p: &&Part| {
        p.op == Op::Check
            && !p.needs_general()
            && matches!(p.entries[..], [e] if e.port == entry.port)
            && match p.at {
                TimeSource::Server => !caller,
                TimeSource::Caller(_) => caller,
                TimeSource::ServerInstant(_) => false,
            }
    };
    parts.iter().all(alike).then_some((row, script, caller))
}

/// The `EVALSHA` of `row`'s lone-check batch script (`lua/batch_gcra.lua`): each part's key,
/// then the clock (`''` the server's, `'c'` the caller's, followed by the earliest deadline of
/// the parts, if any), then the parts in runs of
/// consecutive parts with the same single-entry arguments (one limit, one cost): per run its
/// length and those arguments once, followed on the caller's clock by each part's instant.
fn lone_batch_invocation(row: &Port, script: &Script, caller: bool, parts: &[&Part]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(parts.len());
    for p in parts {
        cmd.arg(p.keys[0].as_str());
    }
    // The batch's deadline: the earliest of its parts' (`lua/batch_gcra.lua`).
    let clock = if caller { "c" } else { "" };
    match parts.iter().filter_map(|p| p.deadline).min() {
        Some(deadline) => cmd.arg(format!("{clock}{deadline}")),
        None => cmd.arg(clock),
    };
    let args = |p: &Part| {
        let e = &p.entries[0];
        (row.single_args)(e.cost, e.params)
    };
    let mut rest = parts;
    while let Some(first) = rest.first() {
        let asked = args(first);
        let n = rest.iter().take_while(|p| args(p) == asked).count();
        cmd.arg(n);
        for a in &asked {
            cmd.arg(*a);
        }
        for p in &rest[..n] {
            if let TimeSource::Caller(now) = p.at {
                cmd.arg(now);
            }
        }
        rest = &rest[n..];
    }
    cmd
}

/// Splits the batch script's reply into each part's own reply, shaped as the general script
/// answers (`{ now, four integers per entry }`, decoded by [`decode`]) or, from a lone-check
/// batch script, as the part's single-entry script answers; or that part's own failure (a
/// string in the reply, see `lua/batch.lua`).
///
/// # Errors
/// [`StoreError::Protocol`] when the reply does not have the parts' shape (every part fails).
pub(crate) fn split_batch(
    reply: Value,
    parts: &[&Part],
) -> Result<Vec<Result<Value, StoreError>>, StoreError> {
    let bad = |what: String| StoreError::Protocol(format!("batch script reply: {what}"));
    let Value::Array(items) = reply else {
        return Err(bad(format!("expected an array, got {reply:?}")));
    };
    if lone_batch(parts).is_some() {
        // One value per request, as its single-entry script answers, or its failure.
        if items.len() != parts.len() {
            return Err(bad(format!(
                "{} values for {} requests",
                items.len(),
                parts.len()
            )));
        }
        return Ok(items.into_iter().map(own_failure).collect());
    }
    let mut items = items.into_iter();
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        match items.next().map(own_failure) {
            Some(Ok(late)) if crate::deadline::is_late(&late) => out.push(Ok(late)),
            Some(Err(failed)) => out.push(Err(failed)),
            Some(Ok(now)) => {
                let len = p.reply_len();
                let mut own = Vec::with_capacity(1 + len);
                own.push(now);
                own.extend(items.by_ref().take(len));
                if own.len() != 1 + len {
                    return Err(bad(format!("request {i} is cut short")));
                }
                out.push(Ok(Value::Array(own)));
            }
            None => return Err(bad(format!("no answer for request {i}"))),
        }
    }
    if items.next().is_some() {
        return Err(bad("more values than requests".to_owned()));
    }
    Ok(out)
}

/// A batch script's value for one request: the late marker is its answer (`deadline.rs`);
/// another string is that request's own failure (the script caught it, `lua/batch.lua`,
/// `lua/batch_gcra.lua`); anything else is its answer.
fn own_failure(value: Value) -> Result<Value, StoreError> {
    match value {
        late if crate::deadline::is_late(&late) => Ok(late),
        Value::BulkString(message) => Err(crate::error::in_batch(
            String::from_utf8_lossy(&message).into_owned(),
        )),
        Value::SimpleString(message) => Err(crate::error::in_batch(message)),
        answer => Ok(answer),
    }
}

/// Decodes a script's reply for `entries` (each at its own cost) into the instant the script used (none
/// when it read no clock) and one decision per entry. Every reply is read as one shape,
/// `{ now, (verdict, b, c, d) × n }`, a one-integer reply being a single entry's verdict with
/// neither instant nor the other three; each entry's row says what its four mean.
///
/// # Errors
/// [`StoreError::Protocol`] for any other shape.
pub(crate) fn decode(
    reply: Value,
    entries: &[&Entry<'_>],
) -> Result<(Option<u64>, SmallVec<[Decision; 2]>), StoreError> {
    let bad = |what: &str| StoreError::Protocol(format!("script reply: {what}"));
    let (now, ints) = match reply {
        Value::Int(verdict) if entries.len() == 1 => (None, vec![verdict]),
        Value::Array(items) => {
            let mut ints = Vec::with_capacity(items.len());
            for v in items {
                match v {
                    Value::Int(i) => ints.push(i),
                    other => return Err(bad(&format!("expected an integer, got {other:?}"))),
                }
            }
            let Some((&now, rest)) = ints.split_first() else {
                return Err(bad("an empty array"));
            };
            let now = u64::try_from(now).map_err(|_| bad(&format!("negative now: {now}")))?;
            (Some(now), rest.to_vec())
        }
        other => return Err(bad(&format!("expected an array, got {other:?}"))),
    };
    let widths: SmallVec<[usize; 2]> = entries
        .iter()
        .map(|e| reply_width(port(e.limit().algorithm()).reply))
        .collect();
    let expected: usize = widths.iter().sum();
    if ints.len() != expected {
        return Err(bad(&format!(
            "expected {} integers for {} entries, got {}",
            1 + expected,
            entries.len(),
            1 + ints.len()
        )));
    }
    let mut rest = &ints[..];
    let mut decisions = SmallVec::new();
    for (e, &w) in entries.iter().zip(&widths) {
        let (own, after) = rest.split_at(w);
        rest = after;
        let mut four = [0_i64; 4];
        four[..w].copy_from_slice(own);
        decisions.push(decide(e.limit(), e.cost(), four)?);
    }
    Ok((now, decisions))
}

/// The decision of one entry of `limit` at `cost` from its four integers, as its row says.
fn decide(limit: &Limit, cost: u64, four: [i64; 4]) -> Result<Decision, StoreError> {
    match port(limit.algorithm()).reply {
        Reply::Decision => decision(limit, four),
        Reply::GcraUsed => gcra_decision(limit, cost, four[0]),
    }
}

/// `verdict, remaining, reset_after_us, retry_after_us`, read as they are.
fn decision(
    limit: &Limit,
    [verdict, remaining, reset, retry]: [i64; 4],
) -> Result<Decision, StoreError> {
    let bad = |what: &str| StoreError::Protocol(format!("script reply: {what}"));
    let unsigned =
        |i: i64, what: &str| u64::try_from(i).map_err(|_| bad(&format!("negative {what}: {i}")));
    let allowed = match verdict {
        1 => true,
        -1 => false,
        other => return Err(bad(&format!("verdict {other}"))),
    };
    let admission = if allowed {
        Admission::Allowed
    } else {
        Admission::Refused(NotUntil::new(Duration::from_micros(unsigned(
            retry,
            "retry_after",
        )?)))
    };
    Ok(Decision {
        admission,
        limit: limit.quota().limit(),
        remaining: unsigned(remaining, "remaining")?,
        reset_after: Duration::from_micros(unsigned(reset, "reset_after")?),
    })
}

/// GCRA's one integer (`lua/gcra.lua`): the key's `tat − now` after an admitted call or, as
/// −1 − it, before a denied one. The decision then comes from the Rust rule itself, on that
/// state at now = 0, so the numbers are the memory store's by construction. A reply the rule
/// contradicts is a protocol error.
fn gcra_decision(limit: &Limit, cost: u64, reply: i64) -> Result<Decision, StoreError> {
    let allowed = reply >= 0;
    let used = if allowed { reply } else { -1 - reply };
    let state = GcraState {
        tat: used.unsigned_abs(),
    };
    // What the rule says of that state: for a denial, the decision itself; for an admit (the
    // state after it), the same numbers without a wait.
    let ruled = Gcra::new(limit.quota()).peek(&state, Timestamp::from_micros(0), cost);
    let [_, tau, _] = params(limit);
    if (allowed && state.tat > tau) || (!allowed && ruled.is_allowed()) {
        return Err(StoreError::Protocol(format!(
            "script reply: GCRA {reply} contradicts the rule (cost {cost}, tau {tau} µs)"
        )));
    }
    Ok(Decision {
        admission: if allowed {
            Admission::Allowed
        } else {
            ruled.admission
        },
        ..ruled
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `e` asking `cost` units (an entry's cost is set only through a validated request).
    fn costing<'a>(e: &Entry<'a>, cost: u64) -> Entry<'a> {
        tollgate::Request::new([e.clone()], cost)
            .expect("valid")
            .entries()[0]
            .clone()
    }
    use tollgate::{Key, Namespace, Quota};

    fn limit(algorithm: Algorithm, per_second: u64) -> Limit {
        Limit::new(
            "l",
            algorithm,
            Quota::per_second(per_second).expect("valid"),
        )
        .expect("valid")
    }

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
            // fmt, ttl_ms, clock, late and start from the prelude, and the algorithm's own
            // function; GCRA's: the arguments bound, then the body, no function at all.
            let expected = if a == Algorithm::Gcra { 0 } else { 6 };
            assert_eq!(defined, expected, "{a}: {defined} functions");
            assert_eq!(call.sha.len(), 40);
            assert_ne!(call.sha, SCRIPT.get_hash());
        }
        // The general script holds GCRA's body once, as a function.
        assert_eq!(SOURCE.matches(GCRA).count(), 1);
    }

    /// The single-entry arguments of a check on the server's clock: GCRA's are inc, tau and
    /// whether T is a whole number of ms; the others' cost and their three parameters; never
    /// op or clock.
    #[test]
    fn single_entry_arguments() {
        // inc = cost × ceil(1 s / 3) µs, tau = 3 intervals.
        assert_eq!(
            ScriptCall::check(&limit(Algorithm::Gcra, 3), 2).args,
            ["666668", "1000002", "0"]
        );
        // T = 1 ms: whole.
        assert_eq!(
            ScriptCall::check(&limit(Algorithm::Gcra, 1000), 3).args,
            ["3000", "1000000", "1"]
        );
        assert_eq!(
            ScriptCall::check(&limit(Algorithm::FixedWindow, 3), 1).args,
            ["1", "3", "1000000", "0"]
        );
        let sw = Limit::new(
            "s",
            Algorithm::SlidingWindow { buckets: 7 },
            Quota::per_second(3).expect("valid"),
        )
        .expect("valid");
        assert_eq!(ScriptCall::check(&sw, 1).args, ["1", "3", "142858", "7"]);
    }

    /// A batch goes as GCRA's lone-check script only when every request is one GCRA check on
    /// one kind of clock; any other request (a peek, two entries, another algorithm, a
    /// give-back's instant, clocks mixed) sends the whole batch as the general batch script.
    /// The lone script's arguments: the keys, the clock, then inc, tau and whole (and, on the
    /// caller's clock, the instant) per request.
    #[test]
    fn batches_pick_the_lone_gcra_script_only_when_every_request_fits() {
        let gcra = limit(Algorithm::Gcra, 4);
        let fw = limit(Algorithm::FixedWindow, 4);
        let ns = Namespace::default();
        let entry = |l: &'static Limit, u: &str| Entry::new(l, Key::new(&ns, l, &[("u", u)]));
        let gcra: &'static Limit = Box::leak(Box::new(gcra));
        let fw: &'static Limit = Box::leak(Box::new(fw));
        let (g1, g2, f1) = (entry(gcra, "1"), entry(gcra, "2"), entry(fw, "1"));
        let part = |op, entries: &[&Entry<'_>], at| Part::new(op, entries, at, false);
        let args = cmd_args;
        let lone = PORTS[usize::from(port_index(Algorithm::Gcra))]
            .lone_batch
            .as_ref()
            .expect("GCRA has one")
            .get_hash();
        let general = BATCH_SCRIPT.get_hash();
        let sha = |parts: &[&Part]| args(&batch_invocation(parts))[1].clone();

        let server = [
            part(Op::Check, &[&g1], TimeSource::Server),
            part(Op::Check, &[&g2], TimeSource::Server),
        ];
        let cmd = batch_invocation(&[&server[0], &server[1]]);
        let (k1, k2) = (g1.key().as_str(), g2.key().as_str());
        assert_eq!(
            args(&cmd),
            [
                "EVALSHA", lone, "2", k1, k2, "", "2", "250000", "1000000", "1"
            ]
        );
        let caller = [
            part(Op::Check, &[&g1], TimeSource::Caller(7)),
            part(Op::Check, &[&g2], TimeSource::Caller(9)),
        ];
        assert_eq!(
            args(&batch_invocation(&[&caller[0], &caller[1]]))[5..],
            ["c", "2", "250000", "1000000", "1", "7", "9"]
        );
        // A run per stretch of requests that ask alike: here costs 1, 1, 3, 1.
        let g3 = costing(&g2, 3);
        let runs = [
            part(Op::Check, &[&g1], TimeSource::Caller(7)),
            part(Op::Check, &[&g2], TimeSource::Caller(8)),
            part(Op::Check, &[&g3], TimeSource::Caller(9)),
            part(Op::Check, &[&g1], TimeSource::Caller(10)),
        ];
        assert_eq!(
            args(&batch_invocation(&runs.iter().collect::<Vec<_>>()))[7..],
            [
                "c", "2", "250000", "1000000", "1", "7", "8", "1", "750000", "1000000", "1", "9",
                "1", "250000", "1000000", "1", "10"
            ]
        );

        for odd in [
            part(Op::Peek, &[&g2], TimeSource::Server),
            part(Op::Check, &[&g2, &f1], TimeSource::Server),
            part(Op::Check, &[&f1], TimeSource::Server),
            part(Op::Check, &[&g2], TimeSource::Caller(7)),
            part(Op::GiveBack, &[&g2], TimeSource::ServerInstant(7)),
        ] {
            assert_eq!(sha(&[&server[0], &odd]), general, "{odd:?}");
            assert_eq!(sha(&[&odd, &server[0]]), general, "{odd:?} first");
        }
        assert_eq!(sha(&[&server[0], &server[1]]), lone);
    }

    /// A command's arguments as strings.
    fn cmd_args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect()
    }

    /// The benchmark's old-script call (`RedisStoreBuilder::old_gcra_script`) is the old
    /// single-entry layout (key, inc, tau) and only ever stands for a one-key GCRA check on
    /// the server's clock.
    #[test]
    #[cfg(feature = "bench")]
    fn the_old_gcra_call_takes_only_what_the_old_script_took() {
        let gcra: &'static Limit = Box::leak(Box::new(limit(Algorithm::Gcra, 4)));
        let fw: &'static Limit = Box::leak(Box::new(limit(Algorithm::FixedWindow, 4)));
        let ns = Namespace::default();
        let g = Entry::new(gcra, Key::new(&ns, gcra, &[("u", "1")]));
        let f = Entry::new(fw, Key::new(&ns, fw, &[("u", "1")]));
        let args = |cmd: Cmd| cmd_args(&cmd);
        let check = Part::new(Op::Check, &[&g], TimeSource::Server, false);
        assert_eq!(
            old_gcra_invocation(&check, "abc").map(args),
            Some(vec![
                "EVALSHA".to_owned(),
                "abc".to_owned(),
                "1".to_owned(),
                g.key().as_str().to_owned(),
                "250000".to_owned(),
                "1000000".to_owned(),
            ])
        );
        for other in [
            Part::new(Op::Peek, &[&g], TimeSource::Server, false),
            Part::new(Op::Check, &[&g], TimeSource::Caller(7), false),
            Part::new(Op::Check, &[&f], TimeSource::Server, false),
            Part::new(Op::Check, &[&g, &f], TimeSource::Server, false),
        ] {
            assert!(old_gcra_invocation(&other, "abc").is_none(), "{other:?}");
        }
    }

    /// A check's deadline goes where the op goes (a number above 2), in every call shape;
    /// the give-back of an unanswered check (`unanswered.rs`) is built only from a reply
    /// that charged every entry, on the clock it charged at.
    #[test]
    fn deadlines_and_undoes() {
        let gcra: &'static Limit = Box::leak(Box::new(limit(Algorithm::Gcra, 4)));
        let fw: &'static Limit = Box::leak(Box::new(limit(Algorithm::FixedWindow, 4)));
        let ns = Namespace::default();
        let g = Entry::new(gcra, Key::new(&ns, gcra, &[("u", "1")]));
        let f = Entry::new(fw, Key::new(&ns, fw, &[("u", "1")]));
        let mut one = Part::new(Op::Check, &[&g], TimeSource::Server, false);
        one.set_deadline(Some(99_000_000));
        let args = cmd_args(&invocation(&one));
        assert_eq!(
            args.last().map(String::as_str),
            Some("99000000"),
            "{args:?}"
        );
        let mut two = Part::new(Op::Check, &[&g, &f], TimeSource::Caller(7), false);
        two.set_deadline(Some(99_000_000));
        let args = cmd_args(&invocation(&two));
        assert_eq!(&args[5..7], ["99000000", "7"], "{args:?}");
        let batch = cmd_args(&batch_invocation(&[&one, &two]));
        // The general batch: the second part's header says op 3 (+ 4: a clock follows).
        assert!(batch.contains(&(3 + 4 + 8 * 2).to_string()), "{batch:?}");
        let lone = cmd_args(&batch_invocation(&[&one, &one]));
        assert_eq!(lone[5], "99000000", "{lone:?}");
        let mut peek = Part::new(Op::Peek, &[&g], TimeSource::Server, false);
        peek.set_deadline(Some(99_000_000));
        assert!(peek.deadline.is_none());

        let int = Value::Int;
        // GCRA alone, admitted: undone on the server's clock (its give-back needs no instant).
        let undo = one.undo_of(&int(5)).expect("charged");
        assert_eq!(
            (undo.op, undo.at, undo.deadline),
            (Op::GiveBack, TimeSource::Server, None)
        );
        assert!(one.undo_of(&int(-3)).is_none(), "a refusal charged nothing");
        let late = Value::BulkString(b"late 123".to_vec());
        assert!(
            one.undo_of(&late).is_none(),
            "a late script charged nothing"
        );
        // Two entries: both admitted, undone at the caller's instant; one refused: nothing.
        let both = Value::Array(vec![int(7), int(0), int(1), int(3), int(10), int(-1)]);
        assert_eq!(
            two.undo_of(&both).map(|u| u.at),
            Some(TimeSource::Caller(7))
        );
        let refused = Value::Array(vec![int(7), int(0), int(-1), int(0), int(10), int(4)]);
        assert!(two.undo_of(&refused).is_none());
        assert!(peek.undo_of(&int(5)).is_none(), "a peek charges nothing");
        let server = Part::new(Op::Check, &[&f], TimeSource::Server, false);
        let fw_reply = Value::Array(vec![int(42), int(1), int(3), int(10), int(-1)]);
        assert_eq!(
            server.undo_of(&fw_reply).map(|u| u.at),
            Some(TimeSource::ServerInstant(42))
        );
    }

    /// A reply of the wrong shape is a protocol error, never a panic or a wrong decision.
    #[test]
    fn malformed_replies_are_protocol_errors() {
        let limit = limit(Algorithm::FixedWindow, 5);
        let entry = Entry::new(
            &limit,
            Key::new(&Namespace::default(), &limit, &[("u", "1")]),
        );
        let one = [&entry];
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
        for reply in [
            Value::Int(2),
            Value::Nil,
            ints(&[]),
            ints(&[1, 1]),
            ints(&[1, 2, 0, 0, -1]),
            ints(&[1, 0, 0, 0, 0]),
            ints(&[1, -1, 0, 0, -5]),
            ints(&[-1, 1, 0, 0, 0]),
            Value::Array(vec![
                Value::Int(1),
                Value::Nil,
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
            ]),
        ] {
            let err = decode(reply.clone(), &one).expect_err("malformed");
            assert!(matches!(err, StoreError::Protocol(_)), "{reply:?}: {err}");
        }
        let (now, d) = decode(ints(&[7, -1, 3, 10, 25]), &one).expect("well formed");
        assert_eq!(now, Some(7));
        assert!(!d[0].is_allowed());
        assert_eq!(d[0].limit, 5);
        assert_eq!(d[0].remaining, 3);
        assert_eq!(d[0].retry_after(), Some(Duration::from_micros(25)));
        // Two entries, one of each reply: each read by its own row.
        let gcra = self::limit(Algorithm::Gcra, 5);
        let second = Entry::new(&gcra, Key::new(&Namespace::default(), &gcra, &[("u", "1")]));
        let (_, d) =
            decode(ints(&[7, 1, 4, 10, -1, 400_000]), &[&entry, &second]).expect("well formed");
        assert!(d[0].is_allowed() && d[0].remaining == 4, "{d:?}");
        assert!(d[1].is_allowed() && d[1].remaining == 3, "{d:?}");
        assert_eq!(d[1].reset_after, Duration::from_millis(400));
    }

    /// GCRA's one integer becomes the decision the Rust rule gives for that state; a reply the
    /// rule contradicts, or of another shape, is a protocol error.
    #[test]
    fn gcra_integer_replies() {
        // 5 per second: T = 200 000 µs, tau = 1 s.
        let limit =
            Limit::new("g", Algorithm::Gcra, Quota::per_second(5).expect("valid")).expect("valid");
        let entry = Entry::new(
            &limit,
            Key::new(&Namespace::default(), &limit, &[("u", "1")]),
        );
        let decide = |reply: Value, cost: u64| {
            let entry = costing(&entry, cost);
            decode(reply, &[&entry]).map(|(now, d)| (now, d[0]))
        };
        // Admitted, 2 units now used: 3 left, full again in 400 ms.
        let (now, d) = decide(Value::Int(400_000), 1).expect("valid");
        assert_eq!(now, None);
        assert_eq!(d, Decision::allowed(5, 3, Duration::from_millis(400)));
        // Denied with 900 ms used: cost 1 needs 100 ms more, cost 2 needs 300 ms.
        for (cost, retry) in [(1, 100), (2, 300)] {
            let (_, d) = decide(Value::Int(-1 - 900_000), cost).expect("valid");
            assert!(!d.is_allowed());
            assert_eq!(d.remaining, 0);
            assert_eq!(d.reset_after, Duration::from_millis(900));
            assert_eq!(
                d.retry_after(),
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
