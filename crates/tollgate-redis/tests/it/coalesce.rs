//! Coalesced calls: the batch script against the Rust rules (random batches mixing algorithms,
//! costs, peeks and checks, keys shared between requests of one batch), per-request
//! all-or-nothing inside a batch, failures inside and of a batch, exactness under concurrency
//! with coalescing on, and expiries after batches.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Algorithm, Ask, Entry, Key, Limit, Limiter, MemoryStore, Namespace, OnStoreError, Op, Outcome,
    Quota, Request, StoreError, Timestamp,
};
use tollgate_redis::RedisStore;
use tollgate_testkit::{RedisServer, Rng, awkward_limits};

use crate::common::{
    TEST_TIMEOUT, cluster_store, keys_without_ttl, redis_store, server, unique_namespace,
};

/// A limiter with no limits of its own, only to prepare requests of limits made here (keys
/// in `ns`, a cost per entry), as [`Limiter::prepare_with`] does for every face.
pub(crate) fn preparer(ns: &Namespace) -> Limiter<MemoryStore> {
    Limiter::builder(MemoryStore::new())
        .namespace(ns.clone())
        .build()
        .expect("no limits")
}

/// A random request: one to three distinct limits for `user`, one cost or a cost per entry.
fn random_request<'a>(
    rng: &mut Rng,
    limits: &'a [Limit],
    preparer: &'a Limiter<MemoryStore>,
    user: &str,
) -> Request<'a> {
    let n = 1 + rng.below(3) as usize;
    let mut chosen: Vec<&Limit> = Vec::new();
    while chosen.len() < n {
        let l = &limits[rng.below(limits.len() as u64) as usize];
        if !chosen.iter().any(|c| c.name() == l.name()) {
            chosen.push(l);
        }
    }
    let capacity = chosen.iter().map(|l| l.capacity()).min().expect("one");
    let costs: Vec<u64> = match rng.below(3) {
        0 => vec![1 + rng.below(capacity); n],
        1 => chosen.iter().map(|l| 1 + rng.below(l.capacity())).collect(),
        _ => vec![1; n],
    };
    let key = [("user", user)];
    preparer
        .prepare_with(
            chosen
                .iter()
                .zip(&costs)
                .map(|(&limit, &cost)| Ask::limit(limit, &key).cost(cost)),
        )
        .expect("valid request")
}

/// Random batches of 1–12 requests, each of 1–3 entries of any algorithms with one cost or a
/// cost per entry, checks and peeks mixed, keys often shared between requests of a batch:
/// the batch script's answers equal the memory store's deciding the same requests one after
/// the other, field by field. `one_user` keeps a batch in one slot (for a cluster).
async fn differential(redis: &RedisStore, ns: &Namespace, one_user: bool) {
    let memory = MemoryStore::builder().sweep_interval(None).build();
    let limits = awkward_limits();
    let preparer = preparer(ns);
    let users = ["a", "b", "c"];
    for seed in [7_u64, 11, 0xBEEF] {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut now = 1_893_456_000_000_000 + rng.below(1_000_000) + seed * 10_000_000_000;
        for step in 0..150 {
            now += match rng.below(10) {
                0 => 0,
                1 => 2_000_000 + rng.below(5_000_000),
                2..=5 => rng.below(1_000),
                _ => rng.below(120_000),
            };
            let size = 1 + rng.below(12) as usize;
            let batch_user = users[rng.below(3) as usize];
            let mut requests = Vec::with_capacity(size);
            for _ in 0..size {
                let user = if one_user {
                    batch_user
                } else {
                    users[rng.below(3) as usize]
                };
                let op = if rng.below(4) == 0 {
                    Op::Peek
                } else {
                    Op::Check
                };
                requests.push((random_request(&mut rng, &limits, &preparer, user), op));
            }
            let at = Timestamp::from_micros(now);
            let expected: Vec<_> = requests
                .iter()
                .map(|(r, op)| memory.decide_at(r, *op, at).expect("memory has room"))
                .collect();
            let asked: Vec<(&Request<'_>, Op)> = requests.iter().map(|(r, op)| (r, *op)).collect();
            let got = redis.decide_batch(&asked, Some(at)).await;
            for (i, (got, expected)) in got.into_iter().zip(expected).enumerate() {
                let got = got.unwrap_or_else(|e| panic!("seed {seed} step {step} #{i}: {e}"));
                let (r, op) = &requests[i];
                let what: Vec<(&str, u64)> = r
                    .entries()
                    .iter()
                    .map(|e| (e.limit().name(), e.cost()))
                    .collect();
                assert_eq!(
                    got, expected,
                    "seed {seed} step {step}, request {i} of {size} ({op:?} {what:?}) at {now}"
                );
            }
        }
    }
}

/// The batch script decides like the Rust rules, request after request; every key it wrote
/// has an expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_decide_like_the_rules_one_after_the_other() {
    let redis = redis_store().await;
    let ns = unique_namespace("batchdiff");
    differential(&redis, &ns, false).await;
    assert!(redis.batches() >= 450, "every step was one batch call");
    let pattern = format!("{}:*", ns.prefix());
    let keys = crate::common::scan(server(), &pattern);
    assert!(keys.len() > 20, "the batches wrote keys: {keys:?}");
    assert_eq!(keys_without_ttl(server(), &pattern), Vec::<String>::new());
}

/// The same on a cluster, each batch in one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_decide_like_the_rules_on_a_cluster() {
    let redis = cluster_store().await;
    differential(&redis, &unique_namespace("cbatchdiff"), true).await;
}

/// In one batch, a request refused by one of its limits charges none of them, while the
/// requests around it (one on the very key it did not charge) are charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_charges_nothing_and_its_neighbours_are_charged() {
    let redis = redis_store().await;
    let ns = unique_namespace("batchnone");
    let wide = Limit::new(
        "wide",
        Algorithm::SlidingLog,
        Quota::per_minute(10).expect("q"),
    )
    .expect("valid");
    let tight =
        Limit::new("tight", Algorithm::Gcra, Quota::per_minute(2).expect("q")).expect("valid");
    let key = |l: &Limit, user: &str| Key::new(&ns, l, &[("user", user)]);
    let at = Timestamp::from_micros(1_893_456_000_000_000);
    // Spend tight for "u" down to 1 unit.
    let preparer = preparer(&ns);
    let first = Request::new([Entry::new(&tight, key(&tight, "u"))], 1).expect("valid");
    let u = [("user", "u")];
    let both = preparer
        .prepare_with([
            Ask::limit(&wide, &u).cost(3),
            Ask::limit(&tight, &u).cost(2),
        ])
        .expect("valid");
    let wide_alone = Request::new([Entry::new(&wide, key(&wide, "u"))], 4).expect("valid");
    let other = Request::new([Entry::new(&tight, key(&tight, "v"))], 2).expect("valid");
    let got = redis
        .decide_batch(
            &[
                (&first, Op::Check),
                (&both, Op::Check),
                (&wide_alone, Op::Check),
                (&other, Op::Check),
            ],
            Some(at),
        )
        .await;
    let got: Vec<_> = got.into_iter().map(|r| r.expect("decided")).collect();
    assert!(got[0][0].is_allowed(), "{got:?}");
    assert!(got[1][0].is_allowed(), "wide alone would admit 3: {got:?}");
    assert!(
        !got[1][1].is_allowed(),
        "tight has 1 left, 2 asked: {got:?}"
    );
    assert!(
        got[2][0].is_allowed() && got[2][0].remaining == 6,
        "wide charged 4 only: {got:?}"
    );
    assert!(
        got[3][0].is_allowed() && got[3][0].remaining == 0,
        "{got:?}"
    );
    // As they stand after the batch.
    let w = Request::new([Entry::new(&wide, key(&wide, "u"))], 1).expect("valid");
    let t = Request::new([Entry::new(&tight, key(&tight, "u"))], 1).expect("valid");
    let peeked = redis
        .decide_batch(&[(&w, Op::Peek), (&t, Op::Peek)], Some(at))
        .await;
    assert_eq!(
        peeked[0].as_ref().expect("peek")[0].remaining,
        6,
        "the refused request took nothing of wide"
    );
    assert_eq!(
        peeked[1].as_ref().expect("peek")[0].remaining,
        1,
        "nor of tight"
    );
}

/// A request whose deciding fails inside the batch (its key holds another type) fails alone,
/// as a script error; its neighbours are decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_request_fails_alone_in_its_batch() {
    let redis = redis_store().await;
    let ns = unique_namespace("batchfail");
    let limit = Limit::new(
        "l",
        Algorithm::FixedWindow,
        Quota::per_minute(5).expect("q"),
    )
    .expect("valid");
    let at = Some(Timestamp::from_micros(1_893_456_000_000_000));
    let got = around_a_list(&redis, &ns, &limit, at).await;
    assert_middle_fails_alone(&got, "a list is not a window");
}

/// A batch of three checks of `limit` at `at` (`None`: the server's clock), the middle one's
/// key holding a list (with an expiry, so that no test leaves an immortal key behind).
async fn around_a_list(
    redis: &RedisStore,
    ns: &Namespace,
    limit: &Limit,
    at: Option<Timestamp>,
) -> Vec<Result<tollgate::Decisions, StoreError>> {
    let bad = Key::new(ns, limit, &[("user", "list")]);
    server().cmd(&["LPUSH", bad.as_str(), "x"]);
    server().cmd(&["PEXPIRE", bad.as_str(), "60000"]);
    let good = Request::new(
        [Entry::new(limit, Key::new(ns, limit, &[("user", "ok")]))],
        1,
    )
    .expect("valid");
    let broken = Request::new([Entry::new(limit, bad)], 1).expect("valid");
    redis
        .decide_batch(
            &[(&good, Op::Check), (&broken, Op::Check), (&good, Op::Check)],
            at,
        )
        .await
}

/// The answers of a batch of three requests on a limit of 5 whose middle one's key holds a
/// list: the first and last decided (4, then 3 left), the middle failing alone as a script
/// error with Redis's cause kept.
fn assert_middle_fails_alone(got: &[Result<tollgate::Decisions, StoreError>], why: &str) {
    assert_eq!(got[0].as_ref().expect("decided")[0].remaining, 4);
    let err = got[1].as_ref().expect_err(why);
    assert!(matches!(err, StoreError::Script(_)), "{err:?}");
    assert!(
        format!("{:?}", std::error::Error::source(err)).contains("WRONGTYPE"),
        "the cause is kept: {err:?}"
    );
    assert_eq!(got[2].as_ref().expect("decided")[0].remaining, 3);
}

/// A batch call that fails fails each of its requests with the same kind of error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_fails_each_request_alike() {
    let mut own = RedisServer::start();
    let redis = RedisStore::builder(own.url())
        .timeout(TEST_TIMEOUT)
        .circuit_breaker(0, Duration::from_secs(1))
        .build()
        .await
        .expect("connect");
    let ns = unique_namespace("batchdown");
    let limit = Limit::new("l", Algorithm::Gcra, Quota::per_minute(5).expect("q")).expect("valid");
    let requests: Vec<Request<'_>> = ["a", "b", "c"]
        .iter()
        .map(|u| {
            Request::new(
                [Entry::new(&limit, Key::new(&ns, &limit, &[("user", *u)]))],
                1,
            )
            .expect("valid")
        })
        .collect();
    own.kill();
    let asked: Vec<(&Request<'_>, Op)> = requests.iter().map(|r| (r, Op::Check)).collect();
    let got = redis.decide_batch(&asked, None).await;
    assert_eq!(got.len(), 3);
    for r in got {
        let err = r.expect_err("Redis is gone");
        assert!(matches!(err, StoreError::Connection(_)), "{err:?}");
    }
}

/// Many tasks on one key with coalescing on: exactly the limit passes, for every algorithm,
/// with the default cap and with a cap of 3 (batches split and sent together), and batch calls
/// did happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_tasks_on_one_key_admit_exactly_the_limit() {
    for max_batch in [tollgate_redis::DEFAULT_MAX_BATCH, 3] {
        let store = RedisStore::builder(server().url())
            .timeout(TEST_TIMEOUT)
            .max_batch(max_batch)
            .build()
            .await
            .expect("connect");
        let limits: Vec<Limit> = Algorithm::ALL
            .into_iter()
            .map(|a| {
                Limit::new(
                    a.name(),
                    a,
                    Quota::new(100, Duration::from_secs(86_400)).expect("q"),
                )
                .expect("valid")
                .on_store_error(OnStoreError::Deny)
            })
            .collect();
        let limiter = Arc::new(
            Limiter::builder(store.clone())
                .namespace(unique_namespace("coalrace"))
                .limits(limits)
                .build()
                .expect("limiter"),
        );
        for a in Algorithm::ALL {
            let tasks: Vec<_> = (0..256)
                .map(|_| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        let v = limiter
                            .check(a.name(), &[("k", "one")])
                            .await
                            .expect("check");
                        assert!(v.store_error().is_none(), "{a}: {v:?}");
                        v.outcome() == Outcome::Allowed
                    })
                })
                .collect();
            let mut admitted = 0;
            for t in tasks {
                admitted += u32::from(t.await.expect("task"));
            }
            assert_eq!(
                admitted, 100,
                "{a}, max_batch {max_batch}: 256 tasks, limit 100"
            );
        }
        assert!(
            store.batches() > 0,
            "max_batch {max_batch}: no call was coalesced"
        );
    }
}

/// GCRA limits with a T of whole ms and of µs, bursts of 1 and more.
fn gcra_awkward_limits() -> Vec<Limit> {
    let q = |limit: u64, ms: u64| Quota::new(limit, Duration::from_millis(ms)).expect("valid");
    let l = |name: &str, q: Quota| Limit::new(name, Algorithm::Gcra, q).expect("valid");
    vec![
        l("whole", q(4, 1_000)),
        l("micros", q(3, 1_000)),
        l("burst", q(6, 700).with_burst(11).expect("valid")),
        l("single", q(5, 100).with_burst(1).expect("valid")),
    ]
}

/// Batches whose every request is one GCRA check (the shape of `lua/batch_gcra.lua`, the
/// common coalesced call), on the caller's clock with one instant per request: each answer
/// equals the memory store's deciding the requests one after the other, and a key shared by
/// requests of one batch is charged by each in turn; every key it wrote has an expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_gcra_batches_decide_like_the_rule_one_after_the_other() {
    let redis = redis_store().await;
    let ns = unique_namespace("gcrabatch");
    lone_gcra_differential(&redis, &ns, false).await;
    let pattern = format!("{}:*", ns.prefix());
    assert_eq!(keys_without_ttl(server(), &pattern), Vec::<String>::new());
}

/// The same on a cluster, each batch in one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_gcra_batches_decide_like_the_rule_on_a_cluster() {
    let redis = cluster_store().await;
    lone_gcra_differential(&redis, &unique_namespace("cgcrabatch"), true).await;
}

/// Random batches of 2–16 lone GCRA checks (four limits, three users, random costs and
/// instants) against the memory store; `one_user` keeps a batch in one slot. Half the
/// requests ask what the one before asked (its limit and cost), so that batches hold runs of
/// several requests sent as one (`lua/batch_gcra.lua`) as well as runs of one.
async fn lone_gcra_differential(redis: &RedisStore, ns: &Namespace, one_user: bool) {
    let memory = MemoryStore::builder().sweep_interval(None).build();
    let limits = gcra_awkward_limits();
    let users = ["a", "b", "c"];
    let mut rng = Rng(0x005E_ED0F_6C2A | 1);
    let mut now = 1_893_456_000_000_000 + rng.below(1_000_000);
    let (mut admitted, mut refused) = (0, 0);
    for step in 0..300 {
        let size = 2 + rng.below(15) as usize;
        let batch_user = users[rng.below(3) as usize];
        let mut requests = Vec::with_capacity(size);
        let mut instants = Vec::with_capacity(size);
        let mut asked: Option<(usize, u64)> = None;
        for _ in 0..size {
            // Each request its own instant, some equal, none earlier than the last.
            now += match rng.below(6) {
                0 => 1_000_000 + rng.below(2_000_000),
                1 | 2 => 0,
                _ => rng.below(90_000),
            };
            instants.push(now);
            let (which, cost) = match asked {
                Some(same) if rng.below(2) == 0 => same,
                _ => {
                    let which = rng.below(limits.len() as u64) as usize;
                    (which, 1 + rng.below(limits[which].capacity()))
                }
            };
            asked = Some((which, cost));
            let limit = &limits[which];
            let user = if one_user {
                batch_user
            } else {
                users[rng.below(3) as usize]
            };
            requests.push(
                Request::new(
                    [Entry::new(limit, Key::new(ns, limit, &[("user", user)]))],
                    cost,
                )
                .expect("valid"),
            );
        }
        let expected: Vec<_> = requests
            .iter()
            .zip(&instants)
            .map(|(r, &t)| {
                memory
                    .decide_at(r, Op::Check, Timestamp::from_micros(t))
                    .expect("memory has room")
            })
            .collect();
        let got = redis.check_batch_at(&requests, &instants).await;
        for (i, (got, expected)) in got.into_iter().zip(expected).enumerate() {
            let got = got.unwrap_or_else(|e| panic!("step {step} #{i}: {e}"));
            if got[0].is_allowed() {
                admitted += 1;
            } else {
                refused += 1;
            }
            assert_eq!(got, expected, "step {step}, request {i} of {size}");
        }
    }
    assert!(
        admitted > 200 && refused > 200,
        "both verdicts: {admitted} / {refused}"
    );
}

/// On the server's clock (no clock argument: the key's expiry holds the state), a batch of
/// lone checks of one GCRA key admits in batch order, each admit one unit fewer, then refuses
/// without charging. Redis's clock counts in ms, so the last unit of the burst passes a ms
/// after the others (`lua/gcra.lua`, "Server's clock": every step errs towards refusing): a
/// call admits the burst less one — or the whole burst when a ms passed during the call, as
/// `PTTL` reads Redis's running clock even inside a script (Redis 7.0: a script that spins
/// between two `PTTL`s of one key sees them differ), which a loaded machine makes likely.
/// That ms can pass after the tenth request was refused: then a later one takes the unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_gcra_batches_on_the_server_clock_spend_the_burst_in_order() {
    let redis = redis_store().await;
    let ns = unique_namespace("gcrabatchsrv");
    let period = Duration::from_secs(86_400);
    let limit =
        Limit::new("daily", Algorithm::Gcra, Quota::new(10, period).expect("q")).expect("valid");
    let key = Key::new(&ns, &limit, &[("user", "u")]);
    let requests: Vec<Request<'_>> = (0..12)
        .map(|_| Request::new([Entry::new(&limit, key.clone())], 1).expect("valid"))
        .collect();
    let asked: Vec<(&Request<'_>, Op)> = requests.iter().map(|r| (r, Op::Check)).collect();
    let admitted = |got: &[Result<tollgate::Decisions, StoreError>]| -> Vec<Option<u64>> {
        got.iter()
            .map(|r| {
                let d = &r.as_ref().expect("decided")[0];
                d.is_allowed().then_some(d.remaining)
            })
            .collect()
    };
    let pttl = || server().integer(&["PTTL", key.as_str()]);
    let first = redis.decide_batch(&asked, None).await;
    let got = admitted(&first);
    let nine: Vec<Option<u64>> = (1..=9).rev().map(Some).collect();
    assert_eq!(got[..9], nine[..], "nine admits in order: {got:?}");
    // The tenth unit passes once a ms has passed, which can fall anywhere in the call, even
    // after a refusal of it: at most one more admit, with nothing left.
    let tenth = got[9..].iter().position(Option::is_some);
    assert!(
        got[9..].iter().all(|a| matches!(a, None | Some(0)))
            && got[9..].iter().filter(|a| a.is_some()).count() <= 1,
        "then at most the tenth unit, with nothing left, among refusals: {got:?}"
    );
    for (i, decided) in first.iter().enumerate().skip(9) {
        if got[i].is_some() {
            continue;
        }
        let refused = decided.as_ref().expect("decided")[0].retry_after();
        if tenth.is_some_and(|t| 9 + t < i) {
            assert!(
                refused.is_some_and(|r| r > Duration::from_secs(8_000)
                    && r <= Duration::from_secs(8_640) + Duration::from_millis(2)),
                "#{i}: the burst is spent: the next unit is one interval away: {refused:?}"
            );
        } else {
            assert!(
                refused.is_some_and(|r| r <= Duration::from_millis(2)),
                "#{i}: the tenth unit is a ms away: {refused:?}"
            );
        }
    }
    let passed_first = got.iter().flatten().count();
    // A second call: at most that tenth unit passes; the refusals write nothing, so the key's
    // expiry moves by at most one unit (8 640 s), not by four.
    let before = pttl();
    let second = redis.decide_batch(&asked[..5], None).await;
    let passed = admitted(&second).iter().filter(|a| a.is_some()).count();
    assert!(passed_first + passed <= 10, "{:?}", admitted(&second));
    let after = pttl();
    let unit_ms = 8_640_000;
    assert!(after > 0, "the key expires: {after}");
    assert!(
        after <= before + unit_ms * i64::try_from(passed).expect("small") + 1,
        "refusals charged: PTTL {before} then {after}"
    );
}

/// In a lone GCRA batch, a request whose key holds another type fails alone (its cause kept);
/// the requests around it are decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_request_fails_alone_in_a_lone_gcra_batch() {
    let redis = redis_store().await;
    let ns = unique_namespace("gcrabatchfail");
    let limit = Limit::new("l", Algorithm::Gcra, Quota::per_minute(5).expect("q")).expect("valid");
    let bad = Key::new(&ns, &limit, &[("user", "list")]);
    server().cmd(&["LPUSH", bad.as_str(), "x"]);
    let good = Request::new(
        [Entry::new(&limit, Key::new(&ns, &limit, &[("user", "ok")]))],
        1,
    )
    .expect("valid");
    let broken = Request::new([Entry::new(&limit, bad)], 1).expect("valid");
    let at = 1_893_456_000_000_000;
    let got = redis
        .check_batch_at(&[good.clone(), broken, good], &[at, at, at])
        .await;
    assert_middle_fails_alone(&got, "a list is not a GCRA key");
}

/// On the server's clock a lone GCRA batch guards a request with `pcall` only where the body
/// reads a value (`GET`: T not a whole number of ms), which fails on a key of another type:
/// there the list's request fails alone. Unguarded, it would fail the whole call after the
/// first request had been charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_read_fails_alone_in_a_lone_gcra_batch_on_the_servers_clock() {
    let redis = redis_store().await;
    let ns = unique_namespace("gcrabatchget");
    // 5 per 7.001 s: T = 1 400 200 µs, not a whole number of ms: a spent key's value is read.
    let quota = Quota::new(5, Duration::from_millis(7_001)).expect("q");
    let limit = Limit::new("l", Algorithm::Gcra, quota).expect("valid");
    let got = around_a_list(&redis, &ns, &limit, None).await;
    assert_middle_fails_alone(&got, "a list is not a GCRA key");
}

/// With T a whole number of ms on the server's clock the body sends only `PTTL`, `PEXPIRE`
/// and `SET`, which take a key of any type, so that path runs without `pcall`: a list under
/// the limit's prefix is decided like any key (with an expiry it keeps its type and only the
/// expiry moves; without one `SET` rewrites it, so it expires), and its neighbours too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_another_type_are_decided_in_a_whole_ms_gcra_batch() {
    let redis = redis_store().await;
    let ns = unique_namespace("gcrabatchwhole");
    let limit = Limit::new("l", Algorithm::Gcra, Quota::per_minute(5).expect("q")).expect("valid");
    let with_ttl = Key::new(&ns, &limit, &[("user", "listttl")]);
    server().cmd(&["LPUSH", with_ttl.as_str(), "x"]);
    // An expiry is this algorithm's state: 2 s (1 s past the slack) reads as 1 s spent.
    server().cmd(&["PEXPIRE", with_ttl.as_str(), "2000"]);
    let immortal = Key::new(&ns, &limit, &[("user", "list")]);
    server().cmd(&["LPUSH", immortal.as_str(), "x"]);
    let one = |key: &Key| Request::new([Entry::new(&limit, key.clone())], 1).expect("valid");
    let good = one(&Key::new(&ns, &limit, &[("user", "ok")]));
    let (with_ttl_request, immortal_request) = (one(&with_ttl), one(&immortal));
    let got = redis
        .decide_batch(
            &[
                (&good, Op::Check),
                (&with_ttl_request, Op::Check),
                (&immortal_request, Op::Check),
                (&good, Op::Check),
            ],
            None,
        )
        .await;
    let decided: Vec<bool> = got
        .iter()
        .map(|d| d.as_ref().expect("decided")[0].is_allowed())
        .collect();
    assert_eq!(decided, [true, true, true, true]);
    assert_eq!(got[3].as_ref().expect("decided")[0].remaining, 3);
    assert_eq!(server().cmd(&["TYPE", with_ttl.as_str()]).trim(), "+list");
    assert_eq!(server().cmd(&["TYPE", immortal.as_str()]).trim(), "+string");
    assert_eq!(
        keys_without_ttl(server(), &format!("{}*", ns.prefix())),
        Vec::<String>::new()
    );
}

/// Out of memory (`maxmemory`, `noeviction`), Redis refuses a script's first write and only
/// that one. In a whole-ms GCRA batch (no `pcall`) the refusal raises: the call fails before
/// anything was written, so every request in it gets the error and none was charged. (With a
/// `pcall` per request, the new key's request would fail and the one after it be charged and
/// admitted in the same call.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_first_write_fails_a_whole_ms_gcra_batch_uncharged() {
    let own = RedisServer::start();
    let redis = RedisStore::builder(own.url())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .expect("connect");
    let ns = unique_namespace("gcrabatchoom");
    let limit = Limit::new("l", Algorithm::Gcra, Quota::per_minute(5).expect("q")).expect("valid");
    let one = |user: &str| {
        Request::new(
            [Entry::new(&limit, Key::new(&ns, &limit, &[("user", user)]))],
            1,
        )
        .expect("valid")
    };
    let (old, new) = (one("old"), one("new"));
    let first = redis.decide_batch(&[(&old, Op::Check)], None).await;
    assert_eq!(first[0].as_ref().expect("decided")[0].remaining, 4);
    let old_key = Key::new(&ns, &limit, &[("user", "old")]);
    let pttl = |key: &Key| own.integer(&["PTTL", key.as_str()]);
    let charged = pttl(&old_key);
    own.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    own.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    let got = redis
        .decide_batch(&[(&new, Op::Check), (&old, Op::Check)], None)
        .await;
    own.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    for (i, answer) in got.iter().enumerate() {
        let err = answer.as_ref().expect_err("out of memory");
        assert!(format!("{err:?}").contains("OOM"), "request {i}: {err:?}");
    }
    // Not charged: an admit would have moved the expiry 12 s further.
    assert!(pttl(&old_key) <= charged, "the old key was charged");
    assert_eq!(pttl(&Key::new(&ns, &limit, &[("user", "new")])), -2);
}
