//! Differential test of every call a store answers, on a caller's clock that also steps
//! back: the Lua scripts against the Rust rules, as in `differential.rs`, through checks,
//! peeks, counted refusals, batches, resets, reservations, cancellations, settlements
//! (charges and refunds) and fixed-window leases. Seeded random sequences go to a
//! `MemoryStore` and a `RedisStore` with the same explicit `now`, which mostly moves on but
//! sometimes goes back on a key (a caller's clock is not monotonic). After every call:
//! - both stores answered the same, field by field;
//! - every key of the namespace has a TTL, and a key the call wrote lives at least until
//!   its quota is full again;
//! - a call that must write nothing (a peek, a refused check, reservation or lease, an entry
//!   refused inside an admitted request, a cancellation that gave nothing back, a
//!   settlement of 0) left every key it names byte-identical (DUMP) with the same expiry
//!   (PEXPIRETIME).
//!
//! A forward clock alone hides the state a store keeps or drops once it no longer counts (a
//! window moved on, a quota full again): only a clock that goes back reads it again. The
//! `*_after_the_clock_went_back` tests replay the shortest sequences that once disagreed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use tollgate::{
    Algorithm, Decision, Entry, Key, LeaseTake, Limit, MemoryStore, Namespace, Need, Op, Pace,
    Quota, Request, Store, Timestamp,
};
use tollgate_redis::RedisStore;
use tollgate_testkit::{Rng, awkward_limits};

use crate::common::{redis_store, server, unique_namespace};

/// Random sequences of every call, the clock stepping back as well as on: every answer,
/// TTL and untouched key as the module says. The seeds are picked so that undoing the fix
/// of any one `*_after_the_clock_went_back` defect fails three of them or more (of seeds 1
/// to 30, the GCRA defect failed 3, the sliding window's 4, the lease's 29).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_decides_identically_on_a_clock_that_goes_back() {
    let limits = limits();
    for seed in [1_u64, 5, 8, 19, 26, 0xDEAD_BEEF] {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        // Near 2030, or, for one seed, near the epoch (instants shorter than the periods).
        let start = if seed == 5 {
            5_000
        } else {
            T0 + rng.below(1 << 30)
        };
        let mut run = Run::new(&limits, start).await;
        for _ in 0..STEPS {
            let step = random_step(&mut rng, &limits, run.now, &run.seen);
            run.step(&step).await;
        }
    }
}

/// Steps per seed of [`every_call_decides_identically_on_a_clock_that_goes_back`]: a few
/// seconds each in a debug build.
const STEPS: usize = 1_500;

/// A lease refused at an earlier instant writes nothing: the memory store used to move the
/// key's count to that instant's window (empty), so that back at the later window's time it
/// admitted 7 more where Redis, counting 1 there, refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_lease_writes_nothing_after_the_clock_went_back() {
    let limits = limits();
    let fw = index(&limits, "fw"); // 7 per second
    replay(
        &limits,
        &[
            Step::Advance(10_000_000),
            check(fw, 1),
            Step::Advance(-5_000_000),
            Step::Lease {
                l: fw,
                u: 0,
                want: 7,
                need: 7,
                give_back: 0,
                window: Some(0),
            },
            Step::Advance(1_000_000),
            check(fw, 7),
        ],
    )
    .await;
}

/// A GCRA refund that brings `tat` back to now empties the key (Redis deletes it): the
/// memory store used to keep `tat = now`, which a clock 1 µs earlier read as a unit spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gcra_refund_to_now_empties_the_key_after_the_clock_went_back() {
    let limits = limits();
    let g = index(&limits, "gcra"); // 3 per second
    replay(
        &limits,
        &[
            check(g, 1),
            Step::Adjust {
                l: g,
                u: 0,
                delta: -1,
            },
            Step::Advance(-1),
            peek(g, 3),
        ],
    )
    .await;
}

/// A cancellation that finds the GCRA key full (`tat` at or before now, the ticket now)
/// empties it (Redis deletes it): the memory store used to keep the old `tat`, which an
/// earlier clock read as spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gcra_cancel_of_a_full_key_empties_it_after_the_clock_went_back() {
    let limits = limits();
    let g = index(&limits, "gcra");
    replay(
        &limits,
        &[
            check(g, 1),
            Step::Advance(10_000_000),
            Step::Cancel {
                l: g,
                u: 0,
                cost: 1,
                ticket: Some(T0 + 10_000_000),
            },
            Step::Advance(-10_000_000),
            peek(g, 3),
        ],
    )
    .await;
}

/// A sliding-window refund drops the buckets that left the span (Redis deletes them, as a
/// charge does): the memory store used to keep them, and they counted again once the clock
/// went back into their span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_window_refund_drops_stale_buckets_after_the_clock_went_back() {
    let limits = limits();
    let sw = index(&limits, "sw3ms"); // 7 per 3 ms, one bucket
    replay(
        &limits,
        &[
            check(sw, 1),
            Step::Advance(10_000),
            Step::Adjust {
                l: sw,
                u: 0,
                delta: -1,
            },
            Step::Advance(-10_000),
            peek(sw, 7),
        ],
    )
    .await;
}

/// The clock the sequences start from (2030-01-01).
const T0: u64 = 1_893_456_000_000_000;
const DAY: u64 = 86_400_000_000;

/// The clock stays below this when it jumps by days: within the supported range
/// (`tollgate::rules`) for the longest quotas of [`limits`], whose debt reaches years ahead.
const LATEST: u64 = 8_000_000_000_000_000;

/// [`awkward_limits`], and limits of 1 per ms, of days and of a billion units.
fn limits() -> Vec<Limit> {
    let q = |limit: u64, us: u64| Quota::new(limit, Duration::from_micros(us)).expect("valid");
    let burst = |q: Quota, burst: u64| q.with_burst(burst).expect("valid");
    let l = |name: &str, a: Algorithm, q: Quota| Limit::new(name, a, q).expect("valid");
    let sw = |buckets| Algorithm::SlidingWindow { buckets };
    let mut limits = awkward_limits();
    limits.extend([
        l("fw1ms", Algorithm::FixedWindow, q(1, 1_000)),
        l("sl1ms", Algorithm::SlidingLog, q(1, 1_000)),
        l("sw1ms", sw(31), q(1, 1_000)),
        l("tb1ms", Algorithm::TokenBucket, q(1, 1_000)),
        l("gcra1ms", Algorithm::Gcra, q(1, 1_000)),
        // T = 428.57 µs, not whole ms; one bucket.
        l("sw3ms", sw(1), q(7, 3_000)),
        l("gcra3ms", Algorithm::Gcra, burst(q(7, 3_000), 2)),
        l("tb3ms", Algorithm::TokenBucket, burst(q(7, 3_000), 13)),
        l("fwdays", Algorithm::FixedWindow, q(3, 7 * DAY)),
        l("sldays", Algorithm::SlidingLog, q(4, 3 * DAY + 1)),
        l("swdays", sw(60), q(5, 366 * DAY)),
        l("tbdays", Algorithm::TokenBucket, q(2, 366 * DAY)),
        l("gcradays", Algorithm::Gcra, burst(q(3, 366 * DAY), 9)),
        l(
            "fwhuge",
            Algorithm::FixedWindow,
            q(1_000_000_000, 366 * DAY),
        ),
        l("swhuge", sw(7), q(1_000_000_000, 1_000_000_000)),
        l(
            "tbhuge",
            Algorithm::TokenBucket,
            q(1_000_000_000, 366 * DAY),
        ),
        l("gcrahuge", Algorithm::Gcra, q(1_000_000, 1_000_000)),
        l(
            "gcrahb",
            Algorithm::Gcra,
            burst(q(1_000_000_000, 1_000_000_000), 1_000_000_000),
        ),
        l(
            "tbb1",
            Algorithm::TokenBucket,
            burst(q(1_000, 1_000_000), 1),
        ),
        l("sl500", Algorithm::SlidingLog, q(500, 2_000_000)),
    ]);
    limits
}

/// Users whose keys need escaping, the empty one, a long one, bytes that are not UTF-8.
fn users() -> Vec<Vec<u8>> {
    vec![
        b"a".to_vec(),
        b"".to_vec(),
        b"}{:*?[x]\\ \n".to_vec(),
        "\u{fc}\u{0}\u{1F600}".as_bytes().to_vec(),
        vec![b'z'; 1500],
        vec![0xff, 0xfe, 0x80],
    ]
}

fn index(limits: &[Limit], name: &str) -> usize {
    limits
        .iter()
        .position(|l| l.name() == name)
        .expect("a limit")
}

/// One entry of a request: limit, user, need (the cost is the request's).
type Ask = (usize, usize, Need);

/// One step of a sequence, on limits and users by index.
#[derive(Clone, Debug)]
enum Step {
    /// Moves the clock, back when negative.
    Advance(i64),
    /// A check (counting refusals when `count`: fixed windows only) or a peek.
    Decide {
        asks: Vec<Ask>,
        cost: u64,
        op: Op,
        count: bool,
    },
    /// Checks in one round trip, each request of its own cost.
    Batch(Vec<(Vec<Ask>, u64)>),
    Reset(Vec<(usize, usize)>),
    Reserve {
        l: usize,
        u: usize,
        cost: u64,
        max_wait: u64,
    },
    /// Cancels `ticket`, or the key's last reservation when `None` (now when none).
    Cancel {
        l: usize,
        u: usize,
        cost: u64,
        ticket: Option<u64>,
    },
    Adjust {
        l: usize,
        u: usize,
        delta: i64,
    },
    /// Gives back into `window`, or the key's last granted window when `None`.
    Lease {
        l: usize,
        u: usize,
        want: u64,
        need: u64,
        give_back: u64,
        window: Option<u64>,
    },
}

fn check(l: usize, cost: u64) -> Step {
    Step::Decide {
        asks: vec![(l, 0, Need::Must)],
        cost,
        op: Op::Check,
        count: false,
    }
}

fn peek(l: usize, cost: u64) -> Step {
    Step::Decide {
        asks: vec![(l, 0, Need::Must)],
        cost,
        op: Op::Peek,
        count: false,
    }
}

/// Runs `steps` from [`T0`]: each must pass as the module says.
async fn replay(limits: &[Limit], steps: &[Step]) {
    let mut run = Run::new(limits, T0).await;
    for step in steps {
        run.step(step).await;
    }
}

/// Each key's DUMP and PEXPIRETIME (`None`, -2 when absent).
type Snapshot = BTreeMap<String, (Option<Vec<u8>>, i64)>;

/// Both stores, their keys and the clock, stepped together.
struct Run<'a> {
    limits: &'a [Limit],
    memory: MemoryStore,
    redis: RedisStore,
    con: redis::Connection,
    ns: Namespace,
    /// Each limit's key of each user.
    keys: Vec<Vec<Key>>,
    now: u64,
    /// The cost and ticket of each key's last reservation.
    tickets: HashMap<(usize, usize), (u64, u64)>,
    /// The window of each key's last lease grant.
    windows: HashMap<(usize, usize), u64>,
    /// Every step and its answers, for a failure's message.
    history: Vec<String>,
    /// The last instants the clock showed, to go back to.
    seen: VecDeque<u64>,
}

impl<'a> Run<'a> {
    async fn new(limits: &'a [Limit], now: u64) -> Run<'a> {
        let ns = unique_namespace("diffclock");
        let users = users();
        let keys = limits
            .iter()
            .map(|l| {
                users
                    .iter()
                    .map(|u| Key::new(&ns, l, &[("user", u.as_slice())]))
                    .collect()
            })
            .collect();
        let con = redis::Client::open(server().url())
            .and_then(|c| c.get_connection())
            .expect("connect");
        Run {
            limits,
            memory: MemoryStore::builder().sweep_interval(None).build(),
            redis: redis_store().await,
            con,
            ns,
            keys,
            now,
            tickets: HashMap::new(),
            windows: HashMap::new(),
            history: Vec::new(),
            seen: VecDeque::new(),
        }
    }

    /// Fails the test: `what`, after the last steps.
    fn fail(&self, what: &str) -> ! {
        let from = self.history.len().saturating_sub(16);
        panic!(
            "step {} at {}: {what}\nlast steps:\n{}",
            self.history.len(),
            self.now,
            self.history[from..].join("\n")
        );
    }

    fn key(&self, l: usize, u: usize) -> String {
        self.keys[l][u].as_str().to_owned()
    }

    fn name(&self, l: usize, u: usize) -> String {
        format!("{}[u{u}]", self.limits[l].name())
    }

    fn request(&self, asks: &[Ask], cost: u64, count: bool) -> Request<'a> {
        let limits = self.limits;
        let entries = asks
            .iter()
            .map(|&(l, u, _)| Entry::new(&limits[l], self.keys[l][u].clone()));
        let mut request = Request::new(entries, cost).expect("valid request");
        for (i, &(_, _, need)) in asks.iter().enumerate() {
            request.set_need(i, need);
        }
        if count {
            request.count_refusals().expect("fixed windows only");
        }
        request
    }

    /// Gives every key of the run a minute more to live in Redis before a call. Redis
    /// expires keys in real time, from expiries set against the fake clock: a key written at
    /// an instant the clock then went back from, and read a second of real time later (a
    /// loaded machine), was gone from Redis while the memory store, on the fake clock, still
    /// held it (seen: a GCRA key read as fresh by Redis and as 287 days in debt by memory).
    /// Decisions do not change: on the caller's clock no script reads a key's expiry. Expiry
    /// itself is checked after each call (every key has one, long enough) and by the tests
    /// that watch real keys expire.
    fn hold_keys(&mut self) {
        const HOLD: &str = "for _, k in ipairs(KEYS) do local t = redis.call('PTTL', k) \
            if t > 0 and t < 60000 then redis.call('PEXPIRE', k, t + 60000) end end return 0";
        let keys: Vec<&str> = self.keys.iter().flatten().map(Key::as_str).collect();
        let held: redis::RedisResult<i64> = redis::cmd("EVAL")
            .arg(HOLD)
            .arg(keys.len())
            .arg(&keys)
            .query(&mut self.con);
        if let Err(e) = held {
            self.fail(&format!("holding the keys: {e}"));
        }
    }

    async fn step(&mut self, step: &Step) {
        if !matches!(step, Step::Advance(_)) {
            self.hold_keys();
        }
        let at = Timestamp::from_micros(self.now);
        match step {
            &Step::Advance(by) => {
                self.now = self.now.saturating_add_signed(by);
                self.history.push(format!("advance {by:+} to {}", self.now));
                if self.seen.len() == 16 {
                    self.seen.pop_front();
                }
                self.seen.push_back(self.now);
                return;
            }
            Step::Decide {
                asks,
                cost,
                op,
                count,
            } => self.decide(asks, *cost, *op, *count).await,
            Step::Batch(requests) => {
                let built: Vec<Request<'_>> = requests
                    .iter()
                    .map(|(asks, cost)| self.request(asks, *cost, false))
                    .collect();
                let expected: Vec<_> = built
                    .iter()
                    .map(|r| {
                        self.memory
                            .decide_at(r, Op::Check, at)
                            .expect("the memory store has room")
                    })
                    .collect();
                let asked: Vec<_> = built.iter().map(|r| (r, Op::Check)).collect();
                let got: Result<Vec<_>, _> = self
                    .redis
                    .decide_batch(&asked, Some(at))
                    .await
                    .into_iter()
                    .collect();
                self.history
                    .push(format!("batch {requests:?} @{}: {got:?}", self.now));
                if got.as_ref().ok() != Some(&expected) {
                    self.fail(&format!("batch: memory {expected:?}, redis {got:?}"));
                }
            }
            Step::Reset(pairs) => {
                let request = self.request(
                    &pairs
                        .iter()
                        .map(|&(l, u)| (l, u, Need::Must))
                        .collect::<Vec<_>>(),
                    1,
                    false,
                );
                self.memory.reset_now(&request);
                self.redis.reset(&request).await.expect("reset");
                self.history.push(format!("reset {pairs:?}"));
                let keys: Vec<String> = pairs.iter().map(|&(l, u)| self.key(l, u)).collect();
                for (k, (dump, _)) in self.snapshot(&keys) {
                    if dump.is_some() {
                        self.fail(&format!("the reset left {k:?}"));
                    }
                }
                for p in pairs {
                    self.tickets.remove(p);
                }
            }
            &Step::Reserve {
                l,
                u,
                cost,
                max_wait,
            } => {
                let max_wait = Duration::from_micros(max_wait);
                self.pace(l, u, cost, Pace::Reserve { max_wait }).await;
            }
            &Step::Cancel { l, u, cost, ticket } => {
                let (cost, ticket) = match ticket {
                    Some(ticket) => (cost, ticket),
                    None => self
                        .tickets
                        .get(&(l, u))
                        .copied()
                        .unwrap_or((cost, self.now)),
                };
                self.pace(l, u, cost, Pace::Cancel { ticket }).await;
            }
            &Step::Adjust { l, u, delta } => self.pace(l, u, 1, Pace::Adjust { delta }).await,
            &Step::Lease {
                l,
                u,
                want,
                need,
                give_back,
                window,
            } => self.lease(l, u, want, need, give_back, window).await,
        }
        self.every_key_expires();
    }

    async fn decide(&mut self, asks: &[Ask], cost: u64, op: Op, count: bool) {
        let at = Timestamp::from_micros(self.now);
        let keys: Vec<String> = asks.iter().map(|&(l, u, _)| self.key(l, u)).collect();
        let before = self.snapshot(&keys);
        let request = self.request(asks, cost, count);
        let expected = self
            .memory
            .decide_at(&request, op, at)
            .expect("the memory store has room");
        let got = self.redis.decide(&request, op, Some(at)).await;
        let names: Vec<String> = asks
            .iter()
            .map(|&(l, u, need)| format!("{need:?} {}", self.name(l, u)))
            .collect();
        let what = format!(
            "{op:?}{} {names:?} cost {cost} @{}",
            if count { " counting refusals" } else { "" },
            self.now
        );
        self.history.push(format!("{what}: {got:?}"));
        match got {
            Ok(got) if got == expected => {}
            got => self.fail(&format!("{what}: memory {expected:?}, redis {got:?}")),
        }
        let decisions: Vec<&Decision> = expected.iter().collect();
        if op == Op::Peek {
            return self.unchanged("a peek", &before, &keys);
        }
        if count {
            // Counted refusals write every key.
            let written: Vec<_> = keys.iter().zip(&decisions).collect();
            return self.lives_until_full(&written);
        }
        if !request.admitted(decisions.iter().map(|d| d.is_allowed())) {
            return self.unchanged("a refused check", &before, &keys);
        }
        let (admitted, refused): (Vec<_>, Vec<_>) = keys
            .iter()
            .zip(&decisions)
            .partition(|(_, d)| d.is_allowed());
        let refused: Vec<String> = refused.into_iter().map(|(k, _)| k.clone()).collect();
        self.unchanged("an entry refused in an admitted request", &before, &refused);
        self.lives_until_full(&admitted);
    }

    async fn pace(&mut self, l: usize, u: usize, cost: u64, pace: Pace) {
        let at = Timestamp::from_micros(self.now);
        let keys = [self.key(l, u)];
        let before = self.snapshot(&keys);
        let request = self.request(&[(l, u, Need::Must)], cost, false);
        let entry = &request.entries()[0];
        let expected = self.memory.pace_at(entry, pace, at);
        let got = self.redis.pace(entry, pace, Some(at)).await;
        let what = format!("{pace:?} {} cost {cost} @{}", self.name(l, u), self.now);
        self.history.push(format!("{what}: {got:?}"));
        let paced = match (expected, got) {
            (Ok(expected), Ok(got)) if got == expected => got,
            // A window algorithm hands out no slot: both refuse, writing nothing.
            (Err(_), Err(_)) if !matches!(pace, Pace::Adjust { .. }) => {
                return self.unchanged("a reservation on a window", &before, &keys);
            }
            (expected, got) => self.fail(&format!("{what}: memory {expected:?}, redis {got:?}")),
        };
        if let Some(slot) = paced.slot {
            self.tickets.insert((l, u), (cost, slot.ticket()));
        }
        let (wrote, nothing) = match pace {
            Pace::Reserve { .. } => (paced.slot.is_some(), paced.slot.is_none()),
            Pace::Cancel { .. } => (false, !paced.given_back),
            Pace::Adjust { delta } => (delta > 0, delta == 0),
        };
        if nothing {
            self.unchanged("a pacing call that changed nothing", &before, &keys);
        }
        if wrote {
            self.lives_until_full(&[(&keys[0], &&paced.decision)]);
        }
    }

    async fn lease(
        &mut self,
        l: usize,
        u: usize,
        want: u64,
        need: u64,
        give_back: u64,
        window: Option<u64>,
    ) {
        let at = Some(Timestamp::from_micros(self.now));
        let keys = [self.key(l, u)];
        let before = self.snapshot(&keys);
        let give_back_window =
            window.unwrap_or_else(|| self.windows.get(&(l, u)).copied().unwrap_or(0));
        let take = LeaseTake {
            limit: &self.limits[l],
            key: &self.keys[l][u],
            want,
            need,
            give_back,
            give_back_window,
        };
        let expected = self.memory.take_lease(&take, at).await;
        let got = self.redis.take_lease(&take, at).await;
        let what = format!(
            "lease {} want {want} need {need} give back {give_back} of {give_back_window} @{}",
            self.name(l, u),
            self.now
        );
        self.history.push(format!("{what}: {got:?}"));
        let grant = match (expected, got) {
            (Ok(expected), Ok(got)) if got == expected => got,
            (expected, got) => self.fail(&format!("{what}: memory {expected:?}, redis {got:?}")),
        };
        if grant.granted > 0 {
            self.windows.insert((l, u), grant.window);
        } else if give_back == 0 {
            self.unchanged("a refused lease", &before, &keys);
        }
    }

    /// Each key's DUMP and absolute expiry.
    fn snapshot(&mut self, keys: &[String]) -> Snapshot {
        if keys.is_empty() {
            return Snapshot::new();
        }
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd("DUMP").arg(k).cmd("PEXPIRETIME").arg(k);
        }
        let values: Vec<redis::Value> = pipe.query(&mut self.con).expect("snapshot");
        keys.iter()
            .zip(values.chunks(2))
            .map(|(k, v)| {
                let dump = match &v[0] {
                    redis::Value::BulkString(b) => Some(b.clone()),
                    _ => None,
                };
                let at = match v[1] {
                    redis::Value::Int(at) => at,
                    _ => -2,
                };
                (k.clone(), (dump, at))
            })
            .collect()
    }

    /// Fails unless `keys` are as in `before`. A key may have expired meanwhile in real
    /// time: its TTL counts from the caller's clock, which may be close to its end.
    fn unchanged(&mut self, call: &str, before: &Snapshot, keys: &[String]) {
        let after = self.snapshot(keys);
        let time: Vec<i64> = redis::cmd("TIME").query(&mut self.con).expect("time");
        let real_ms = time[0] * 1_000 + time[1] / 1_000;
        for k in keys {
            let expired = matches!(
                (&before[k], &after[k]),
                ((Some(_), at), (None, _)) if *at >= 0 && *at <= real_ms + 1
            );
            if before[k] != after[k] && !expired {
                let len = |(d, at): &(Option<Vec<u8>>, i64)| (d.as_ref().map(Vec::len), *at);
                self.fail(&format!(
                    "{call} changed {k:?}: (DUMP length, PEXPIRETIME) {:?} -> {:?}",
                    len(&before[k]),
                    len(&after[k])
                ));
            }
        }
    }

    /// Fails unless each key written lives at least until its quota is full again (the
    /// scripts add a second of slack, of which up to 900 ms may have passed since).
    fn lives_until_full(&mut self, written: &[(&String, &&Decision)]) {
        if written.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for (k, _) in written {
            pipe.cmd("PTTL").arg(*k);
        }
        let ttls: Vec<i64> = pipe.query(&mut self.con).expect("pttl");
        for ((k, d), ttl) in written.iter().zip(ttls) {
            let full_in_ms = i64::try_from(d.reset_after.as_micros().div_ceil(1_000))
                .expect("ms")
                .saturating_add(100);
            // Deleted when the call left it full.
            if ttl == -2 && d.reset_after.is_zero() {
                continue;
            }
            if ttl < full_in_ms {
                self.fail(&format!(
                    "{k:?}: PTTL {ttl} ms, full again in {:?}",
                    d.reset_after
                ));
            }
        }
    }

    /// Fails when a key of the namespace has no TTL.
    fn every_key_expires(&mut self) {
        let pattern = format!("{}:*", self.ns.prefix());
        let keys = crate::common::scan(server(), &pattern);
        if keys.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("PTTL").arg(k);
        }
        let ttls: Vec<i64> = pipe.query(&mut self.con).expect("pttl");
        if let Some((k, _)) = keys.iter().zip(ttls).find(|&(_, ttl)| ttl == -1) {
            self.fail(&format!("{k:?} has no TTL"));
        }
    }
}

/// A random step: mostly calls on a few busy keys, a third of the time a clock step (back
/// in one of five, by up to a period or to an instant shown before).
fn random_step(rng: &mut Rng, limits: &[Limit], now: u64, seen: &VecDeque<u64>) -> Step {
    let n_users = users().len() as u64;
    let limit = |rng: &mut Rng| rng.below(limits.len() as u64) as usize;
    // Mostly the first two users, so that keys get busy.
    let user = |rng: &mut Rng| {
        if rng.below(4) == 0 {
            rng.below(n_users) as usize
        } else {
            rng.below(2) as usize
        }
    };
    // Sliding logs store a member per unit: costs of at most 600.
    let cost = |rng: &mut Rng, l: &Limit| {
        let cap = if l.algorithm() == Algorithm::SlidingLog {
            l.capacity().min(600)
        } else {
            l.capacity()
        };
        match rng.below(8) {
            0 => cap,
            1 => 1 + rng.below(cap),
            2 => (cap / 2).max(1),
            _ => 1,
        }
    };
    match rng.below(100) {
        0..=29 => {
            let period = limits[limit(rng)].quota().period_micros();
            let interval = limits[limit(rng)].quota().emission_interval_micros();
            let by = match rng.below(14) {
                0 | 1 => 0,
                2 => 1,
                3 => rng.below(1_000),
                4 => rng.below(period.min(1 << 40)),
                5 => interval + rng.below(3) - 1,
                // To a window's edge, −1, 0 or +1.
                6 | 7 => period - now % period + rng.below(3) - 1,
                8 if now < LATEST => 366 * DAY + rng.below(DAY),
                9 if now < LATEST => 7 * DAY,
                10 if now > 0 => return Step::Advance(-(rng.below(period.min(now)) as i64) - 1),
                11 => return Step::Advance(-1),
                12 if !seen.is_empty() => {
                    let then = seen[rng.below(seen.len() as u64) as usize];
                    return Step::Advance(i64::try_from(then).expect("small") - now as i64);
                }
                _ => rng.below(5_000_000),
            };
            Step::Advance(i64::try_from(by).expect("small"))
        }
        30..=59 => {
            // Counted refusals (fixed windows only), a peek or a check of one to three
            // entries, mostly one user's.
            let count = rng.below(12) == 0;
            let op = if !count && rng.below(6) == 0 {
                Op::Peek
            } else {
                Op::Check
            };
            let u = user(rng);
            let n = 1 + rng.below(3) as usize;
            let mut asks: Vec<Ask> = Vec::new();
            while asks.len() < n {
                let l = limit(rng);
                if count && limits[l].algorithm() != Algorithm::FixedWindow {
                    continue;
                }
                let u = if rng.below(5) == 0 { user(rng) } else { u };
                if asks.iter().any(|&(a, b, _)| (a, b) == (l, u)) {
                    continue;
                }
                let need = match rng.below(10) {
                    _ if count => Need::Must,
                    0 => Need::OneOf,
                    1 => Need::Optional,
                    _ => Need::Must,
                };
                asks.push((l, u, need));
            }
            let smallest = asks
                .iter()
                .map(|&(l, _, _)| &limits[l])
                .min_by_key(|l| l.capacity())
                .expect("one entry");
            let cost = cost(rng, smallest).min(smallest.capacity());
            Step::Decide {
                asks,
                cost,
                op,
                count,
            }
        }
        60..=66 => {
            let requests = (0..2 + rng.below(3))
                .map(|_| {
                    let (l, u) = (limit(rng), user(rng));
                    let c = cost(rng, &limits[l]);
                    let mut asks = vec![(l, u, Need::Must)];
                    let other = limit(rng);
                    if rng.below(3) == 0 && other != l && limits[other].capacity() >= c {
                        asks.push((other, u, Need::Must));
                    }
                    (asks, c)
                })
                .collect();
            Step::Batch(requests)
        }
        67..=69 => {
            let mut pairs = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let pair = (limit(rng), user(rng));
                if !pairs.contains(&pair) {
                    pairs.push(pair);
                }
            }
            Step::Reset(pairs)
        }
        70..=81 => {
            // Mostly on GCRA and token buckets; on a window both stores refuse.
            let (l, u) = (limit(rng), user(rng));
            let interval = limits[l].quota().emission_interval_micros();
            let max_wait = match rng.below(6) {
                0 => 0,
                1 => rng.below(interval.max(1)),
                2 => interval * (1 + rng.below(5)),
                3 => 3_600_000_000,
                4 => rng.below(10_000_000),
                _ => 1 << 50,
            };
            let cost = cost(rng, &limits[l]);
            Step::Reserve {
                l,
                u,
                cost,
                max_wait,
            }
        }
        82..=85 => {
            // The last reservation's ticket, or one made up (mostly not the key's).
            let (l, u) = (limit(rng), user(rng));
            let cost = cost(rng, &limits[l]);
            let ticket = (rng.below(4) == 0).then(|| now + rng.below(1_000_000));
            Step::Cancel { l, u, cost, ticket }
        }
        86..=94 => {
            let (l, u) = (limit(rng), user(rng));
            let capacity = i64::try_from(limits[l].capacity()).expect("small");
            let log = limits[l].algorithm() == Algorithm::SlidingLog;
            let delta = match rng.below(9) {
                0 => 0,
                1 => 1,
                2 => -1,
                3 if log => capacity.min(600),
                3 => capacity,
                4 => -capacity,
                5 => -(rng.below(1_000_000_000_000) as i64),
                6 if !log => 1 + rng.below(1_000_000_000_000) as i64,
                7 if !log => 1_000_000_000,
                _ => 1 + rng.below(capacity.min(600) as u64) as i64,
            };
            Step::Adjust { l, u, delta }
        }
        _ => {
            let windows: Vec<usize> = (0..limits.len())
                .filter(|&i| limits[i].algorithm() == Algorithm::FixedWindow)
                .collect();
            let l = windows[rng.below(windows.len() as u64) as usize];
            let u = user(rng);
            let most = limits[l].capacity().min(1_000);
            let want = 1 + rng.below(most);
            let need = rng.below(want + 1).max(u64::from(rng.below(3) != 0));
            let give_back = if rng.below(2) == 0 {
                0
            } else {
                rng.below(most + 1)
            };
            // Now's window, or the key's last grant's.
            let period = limits[l].quota().period_micros();
            let window = (rng.below(5) == 0).then(|| now - now % period);
            Step::Lease {
                l,
                u,
                want,
                need,
                give_back,
                window,
            }
        }
    }
}
