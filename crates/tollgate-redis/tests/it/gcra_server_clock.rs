//! GCRA on the server's clock, where its state is the key's expiry (`lua/gcra.lua`): the
//! conformance suite and the differential test drive a fake clock, so they exercise the other
//! encoding; these tests hold this one to the same arithmetic on Redis's real clock.
//!
//! Real time passes here, so bounds allow for it: a figure that counts down on Redis's clock
//! is checked against its exact value less the real time measured since its state was first
//! written (plus a slack of 200 ms), on quotas of seconds or hours. A fixed slack alone does
//! not do: a loaded 2-core machine took 295 ms over ten calls.

use std::time::{Duration, Instant};

use tollgate::{Algorithm, Decision, Entry, Key, Limit, Op, Quota, Request, Store, Timestamp};
use tollgate_redis::RedisStore;

use crate::common::{redis_store, server, unique_namespace};

/// Slack for real time elapsed between a call and the next assertion.
const SLACK: Duration = Duration::from_millis(200);
/// What every tollgate key lives past its state's end (`lua/gcra.lua`).
const SLACK_SECOND: Duration = Duration::from_secs(1);

/// A store, a GCRA limit of `limit` per `period` and one key of it, in a namespace of its own.
async fn one_key(what: &str, limit: u64, period: Duration) -> (RedisStore, Limit, Key) {
    let limit = Limit::new(
        "g",
        Algorithm::Gcra,
        Quota::new(limit, period).expect("valid"),
    )
    .expect("valid");
    let key = Key::new(&unique_namespace(what), &limit, &[("user", "1")]);
    (redis_store().await, limit, key)
}

async fn check(store: &RedisStore, limit: &Limit, key: &Key, cost: u64) -> Decision {
    let request = Request::new([Entry::new(limit, key.clone())], cost).expect("valid");
    store
        .decide(&request, Op::Check, None)
        .await
        .expect("check")[0]
}

/// One command on a connection of its own to the shared server.
fn query<T: redis::FromRedisValue>(cmd: &str, key: &Key) -> T {
    let mut con = redis::Client::open(server().url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    redis::cmd(cmd)
        .arg(key.as_str())
        .query(&mut con)
        .unwrap_or_else(|e| panic!("{cmd} {key}: {e}"))
}

fn pttl_ms(key: &Key) -> i64 {
    query("PTTL", key)
}

fn value(key: &Key) -> String {
    query("GET", key)
}

/// Whether `actual`, a figure that counts down on Redis's clock from the state's first write,
/// is `expected` less at most the real time `since` then (measured here from before that
/// write, so no less than what passed on Redis's clock) and [`SLACK`]. The time is measured,
/// not assumed: a loaded machine stretched ten calls to 295 ms.
fn within_after(actual: Duration, expected: Duration, since: Duration) -> bool {
    actual <= expected && actual + since + SLACK >= expected
}

/// Ten per hour: each admit moves the key's expiry one interval (6 minutes) later (the expiry
/// is `tat` plus one second of slack), the decisions count down as the rule's do, and the
/// eleventh is refused with the rule's wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_the_keys_expiry() {
    let (store, limit, key) = one_key("gcra-expiry", 10, Duration::from_secs(3_600)).await;
    let t = Duration::from_secs(360);
    // Every figure below counts down from the first admit on Redis's clock.
    let started = Instant::now();
    for i in 1..=10_u32 {
        let d = check(&store, &limit, &key, 1).await;
        assert!(d.is_allowed(), "call {i}: {d:?}");
        assert_eq!(d.remaining, u64::from(10 - i), "call {i}: {d:?}");
        let since = started.elapsed();
        assert!(
            within_after(d.reset_after, t * i, since),
            "call {i}, {since:?} in: {d:?}"
        );
        let expiry = Duration::from_millis(pttl_ms(&key).try_into().expect("has a TTL"));
        let since = started.elapsed();
        assert!(
            within_after(expiry, t * i + SLACK_SECOND, since),
            "call {i}, {since:?} in: PTTL {expiry:?}"
        );
        // A whole number of ms per interval: nothing below the ms to keep.
        assert_eq!(value(&key), "0");
    }
    let d = check(&store, &limit, &key, 1).await;
    assert!(!d.is_allowed(), "{d:?}");
    assert_eq!(d.remaining, 0);
    let retry = d.retry_after().expect("denied");
    let since = started.elapsed();
    assert!(within_after(retry, t, since), "{since:?} in: {d:?}");
    // Denied: nothing written, the expiry is where the tenth admit put it.
    let expiry = Duration::from_millis(pttl_ms(&key).try_into().expect("has a TTL"));
    let since = started.elapsed();
    assert!(
        within_after(expiry, t * 10 + SLACK_SECOND, since),
        "{since:?} in: PTTL {expiry:?}"
    );
}

/// Three per second: T = 333 334 µs is not a whole number of ms, so the value keeps the µs
/// below the expiry, and two admits add up to exactly 2 T.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microseconds_below_the_expiry_are_kept() {
    let (store, limit, key) = one_key("gcra-us", 3, Duration::from_secs(1)).await;
    let d = check(&store, &limit, &key, 1).await;
    assert_eq!(d.reset_after, Duration::from_micros(333_334), "{d:?}");
    // tat − now = 333 334 µs = 334 ms − 666 µs.
    assert_eq!(value(&key), "666");
    let started = Instant::now();
    let d = check(&store, &limit, &key, 1).await;
    let elapsed = started.elapsed();
    let expected = Duration::from_micros(666_668);
    // The second call sees the first's state aged by the time between them, on Redis's ms
    // clock: 2 T minus whole ms elapsed (one more for a ms boundary crossed).
    assert!(
        d.reset_after <= expected && d.reset_after + elapsed + SLACK >= expected,
        "{d:?}"
    );
    let below: u64 = value(&key).parse().expect("an integer");
    let used = d.reset_after.as_micros() as u64;
    assert_eq!(below, used.div_ceil(1000) * 1000 - used, "{d:?}");
}

/// Five per 250 ms: refused after the burst, admitted again once the wait it was given has
/// passed (not more than a ms early); full again, the key reads as full through its second
/// of slack, then expires.
///
/// The refusal needs the six calls within one interval (50 ms) of Redis's clock. A loaded
/// machine can stretch them past it, and then the sixth is rightly admitted: that is allowed
/// only when an interval has passed since the burst began (else it is an over-admission,
/// which fails), and the burst is then taken again on a fresh key, at most ten times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replenishes_on_the_servers_clock() {
    let mut attempt = 0;
    let (store, limit, key, refused_at, retry) = loop {
        attempt += 1;
        let (store, limit, key) = one_key("gcra-real", 5, Duration::from_millis(250)).await;
        let burst_at = Instant::now();
        for i in 0..5 {
            assert!(
                check(&store, &limit, &key, 1).await.is_allowed(),
                "call {i}"
            );
        }
        // Taken before the call: Redis decided after it, so the wait is measured from no later.
        let refused_at = Instant::now();
        let denied = check(&store, &limit, &key, 1).await;
        if denied.is_allowed() {
            let took = burst_at.elapsed();
            assert!(
                took + Duration::from_millis(1) >= Duration::from_millis(50),
                "a sixth unit {took:?} after a burst of five per 250 ms began: {denied:?}"
            );
            assert!(
                attempt < 10,
                "ten bursts, each slower than an interval; the last took {took:?}"
            );
            continue;
        }
        let retry = denied.retry_after().expect("denied");
        assert!(retry <= Duration::from_millis(50), "{denied:?}");
        break (store, limit, key, refused_at, retry);
    };
    // Bounded polling on real time: the quota is 250 ms, the deadline 5 s.
    let deadline = refused_at + Duration::from_secs(5);
    let admitted_at = loop {
        if check(&store, &limit, &key, 1).await.is_allowed() {
            break Instant::now();
        }
        assert!(Instant::now() < deadline, "never admitted again");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert!(
        admitted_at + Duration::from_millis(1) >= refused_at + retry,
        "admitted {:?} after a refusal that said {retry:?}",
        admitted_at - refused_at
    );
    // Full again (within 250 ms), the key stays for its second of slack and reads as full
    // without its value: the next call sees the whole burst.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pttl_ms(&key) > 1_000 {
        assert!(
            Instant::now() < deadline,
            "never full again: PTTL {}",
            pttl_ms(&key)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        query::<bool>("EXISTS", &key),
        "the key left before its slack second"
    );
    let d = check(&store, &limit, &key, 1).await;
    assert_eq!(d.remaining, 4, "{d:?}");
    assert_eq!(d.reset_after, Duration::from_millis(50), "{d:?}");
    // Left idle, the key expires a second after its quota is full.
    let deadline = Instant::now() + Duration::from_secs(5);
    while query::<bool>("EXISTS", &key) {
        assert!(
            Instant::now() < deadline,
            "key still there: PTTL {}",
            pttl_ms(&key)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key written on a caller's clock (tat in µs as the value), read on the server's clock,
/// reads as at least as spent as it is, never less: the mix is unsupported, but cannot
/// over-admit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_clock_key_is_never_read_as_less_spent() {
    let (store, limit, key) = one_key("gcra-mixed", 3, Duration::from_secs(3_600)).await;
    let request = Request::new([Entry::new(&limit, key.clone())], 3).expect("valid");
    let now = Timestamp::from_micros(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_micros() as u64,
    );
    let d = store
        .decide(&request, Op::Check, Some(now))
        .await
        .expect("check");
    assert!(d[0].is_allowed() && d[0].remaining == 0, "{d:?}");
    let d = check(&store, &limit, &key, 1).await;
    assert!(
        !d.is_allowed(),
        "the server's clock admitted past a spent quota: {d:?}"
    );
    let retry = d.retry_after().expect("denied");
    assert!(retry >= Duration::from_secs(1_200) - SLACK, "{d:?}");
}

/// `GET` calls so far on `server` (`cmdstat_get` in `INFO commandstats`).
fn gets(server: &tollgate_testkit::RedisServer) -> u64 {
    server.command_stats("get").calls
}

/// With T a whole number of ms the value is always 0, so a spent key is read with `PTTL`
/// alone (one command fewer per call); with T not whole the `GET` is needed and made. A key
/// left by a quota whose T is not whole (its value the µs below the ms) and read by one whose
/// T is reads as at least as spent as it is, never less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_ms_interval_reads_a_spent_key_without_get() {
    let server = tollgate_testkit::RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    let gcra = |limit: u64, period: Duration| {
        Limit::new(
            "g",
            Algorithm::Gcra,
            Quota::new(limit, period).expect("valid"),
        )
        .expect("valid")
    };
    let check = |limit: Limit, key: Key| {
        let store = &store;
        async move {
            let request = Request::new([Entry::new(&limit, key)], 1).expect("valid");
            store
                .decide(&request, Op::Check, None)
                .await
                .expect("check")[0]
        }
    };
    let ns = unique_namespace("gcra-get");

    // 10 per hour: T = 360 s. Ten admits then ten refusals of a spent key, no GET.
    let whole = gcra(10, Duration::from_secs(3_600));
    let key = Key::new(&ns, &whole, &[("user", "whole")]);
    let before = gets(&server);
    let admitted = {
        let mut n = 0;
        for _ in 0..20 {
            n += u32::from(check(whole.clone(), key.clone()).await.is_allowed());
        }
        n
    };
    assert_eq!(admitted, 10);
    assert_eq!(gets(&server) - before, 0, "GET on a whole-ms interval");

    // 3 per second: T = 333 334 µs. The spent key's value is read.
    let not_whole = gcra(3, Duration::from_secs(1));
    let key = Key::new(&ns, &not_whole, &[("user", "us")]);
    let before = gets(&server);
    let started = Instant::now();
    for i in 0..3 {
        assert!(
            check(not_whole.clone(), key.clone()).await.is_allowed(),
            "call {i}"
        );
    }
    assert!(
        gets(&server) - before >= 2,
        "no GET where the value matters"
    );
    // Three admits: tat − now = 1 000 002 µs, the value 998. Read by 1 per second (T = 1 s,
    // whole): refused, and told to wait at least what is truly owed (less the time since).
    let d = check(gcra(1, Duration::from_secs(1)), key.clone()).await;
    let elapsed = started.elapsed();
    assert!(!d.is_allowed(), "{d:?}");
    let retry = d.retry_after().expect("denied");
    assert!(
        retry + elapsed + Duration::from_millis(1) >= Duration::from_micros(1_000_002),
        "read as less spent than it is: {d:?} after {elapsed:?}"
    );
}

/// With T a whole number of ms, an admit on a key that exists only moves its expiry
/// (`PEXPIRE`): `SET` runs once, when the key is created. The decisions and expiries are the
/// ones `state_is_the_keys_expiry` checks; this counts the commands that made them, on a
/// Redis of its own so that no other test's commands count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_ms_admits_move_only_the_expiry() {
    let own = tollgate_testkit::RedisServer::start();
    let store = RedisStore::builder(own.url()).build().await.expect("store");
    let limit =
        Limit::new("g", Algorithm::Gcra, Quota::per_hour(10).expect("valid")).expect("valid");
    let key = Key::new(&unique_namespace("gcra-pexpire"), &limit, &[("user", "1")]);
    for i in 1..=10 {
        assert!(
            check(&store, &limit, &key, 1).await.is_allowed(),
            "call {i}"
        );
    }
    assert!(!check(&store, &limit, &key, 1).await.is_allowed());
    assert_eq!(own.command_stats("set").calls, 1);
    assert_eq!(own.command_stats("pexpire").calls, 9);
    let ttl = own.integer(&["PTTL", key.as_str()]);
    // Ten intervals of 6 minutes, plus the second of slack.
    assert!((3_600_000..=3_601_000).contains(&ttl), "PTTL {ttl}");
}

/// T = 500 µs is not a whole number of ms, but a cost of 2 asks a whole 1 ms: the value the
/// cost-1 admit left below the ms (500 µs) must be rewritten, not kept behind a moved
/// expiry, or the key would read 500 µs less spent than the admit made it. Whether `PEXPIRE`
/// may stand for `SET` follows from T, never from the cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cost_on_a_sub_ms_interval_rewrites_the_value() {
    let (store, limit, key) = one_key("gcra-mixed-cost", 2_000, Duration::from_secs(1)).await;
    assert!(check(&store, &limit, &key, 1).await.is_allowed());
    assert_eq!(value(&key), "500");
    assert!(check(&store, &limit, &key, 2).await.is_allowed());
    assert_eq!(value(&key), "0");
}

/// A key whose expiry was taken away (`PERSIST`, by hand or by a tool) reads as full and gets
/// an expiry back at its next admit: moving an expiry (`PEXPIRE`) is only for a key that has
/// one, and no admit leaves a key immortal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_key_gets_its_expiry_back() {
    let (store, limit, key) = one_key("gcra-persist", 10, Duration::from_secs(3_600)).await;
    assert!(check(&store, &limit, &key, 1).await.is_allowed());
    let _: i64 = query("PERSIST", &key);
    assert_eq!(pttl_ms(&key), -1);
    let started = Instant::now();
    let d = check(&store, &limit, &key, 1).await;
    // Read as full: this admit is the first of a fresh burst.
    assert_eq!(d.remaining, 9, "{d:?}");
    let expiry = Duration::from_millis(pttl_ms(&key).try_into().expect("has a TTL again"));
    let since = started.elapsed();
    assert!(
        within_after(expiry, Duration::from_secs(360) + SLACK_SECOND, since),
        "{since:?} in: PTTL {expiry:?}"
    );
}

/// A lone GCRA batch formats a key's expiry only when its ms differ from the last it formatted
/// (`last_ms` in `lua/gcra.lua`): keys in different states, interleaved in one batch, each
/// get their own expiry, as one call each would give them. A memo that kept a stale value
/// would give one key the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_writes_each_keys_own_expiry() {
    let (store, limit, spent) = one_key("gcra-batch-expiry", 10, Duration::from_secs(3_600)).await;
    let fresh = Key::new(
        &unique_namespace("gcra-batch-expiry"),
        &limit,
        &[("user", "2")],
    );
    // Both expiries count down from here on Redis's clock.
    let started = Instant::now();
    for _ in 0..3 {
        assert!(check(&store, &limit, &spent, 1).await.is_allowed());
    }
    let one = |key: &Key| Request::new([Entry::new(&limit, key.clone())], 1).expect("valid");
    let (a, b) = (one(&spent), one(&fresh));
    let got = store
        .decide_batch(
            &[
                (&a, Op::Check),
                (&b, Op::Check),
                (&a, Op::Check),
                (&b, Op::Check),
            ],
            None,
        )
        .await;
    let remaining: Vec<u64> = got
        .iter()
        .map(|d| d.as_ref().expect("decided")[0].remaining)
        .collect();
    assert_eq!(remaining, [6, 9, 5, 8]);
    // Intervals of 6 minutes: 5 spent on one key, 2 on the other, each plus the slack.
    let interval = Duration::from_secs(360);
    let ttl = |key: &Key| Duration::from_millis(u64::try_from(pttl_ms(key)).expect("an expiry"));
    let (spent_ttl, fresh_ttl) = (ttl(&spent), ttl(&fresh));
    let since = started.elapsed();
    assert!(
        within_after(spent_ttl, interval * 5 + SLACK_SECOND, since),
        "{since:?} in: {spent_ttl:?}"
    );
    assert!(
        within_after(fresh_ttl, interval * 2 + SLACK_SECOND, since),
        "{since:?} in: {fresh_ttl:?}"
    );
}

/// Reservations on the server's clock (`lua/pace.lua` reads and writes the expiry-encoded
/// state as an absolute instant): consecutive slots that the ordinary check script sees as
/// spent, a cancellation of the last slot gives it back exactly (the next reservation gets the
/// same ticket), and the key keeps an expiry. For T a whole number of ms (the value unread)
/// and not (the value holds the µs).
///
/// Nothing here waits for a slot, so the intervals are long: every figure holds only while
/// the state is ahead of Redis's clock, and the calls of one round took over 300 ms on a
/// loaded machine (past the third slot of an interval of 100 ms: the check was admitted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_on_the_servers_clock() {
    // 10 per minute (T = 6 s, whole) and 7 per minute (T = 8 571 429 µs, not whole).
    for (per_minute, what) in [(10, "pace-whole"), (7, "pace-sub-ms")] {
        for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
            let limit = Limit::new(
                "p",
                algorithm,
                Quota::per_minute(per_minute).expect("valid"),
            )
            .expect("valid")
            .keyed_by(["user"])
            .expect("valid");
            let t = Duration::from_micros(limit.quota().emission_interval_micros());
            let limiter = tollgate::Limiter::builder(redis_store().await)
                .namespace(unique_namespace(what))
                .limit(limit)
                .build()
                .expect("valid");
            let key = [("user", "1")];
            let hour = Duration::from_secs(3_600);
            // The waits below count down from the burst on Redis's clock.
            let started = Instant::now();
            for _ in 0..per_minute {
                let r = limiter.reserve("p", &key, 1, hour).await.expect("valid");
                assert_eq!(r.wait(), Some(Duration::ZERO), "{what} {algorithm}: burst");
            }
            let first = limiter.reserve("p", &key, 1, hour).await.expect("valid");
            let second = limiter.reserve("p", &key, 1, hour).await.expect("valid");
            let (w1, w2) = (first.wait().expect("slot"), second.wait().expect("slot"));
            let since = started.elapsed();
            assert!(
                within_after(w1, t, since),
                "{what} {algorithm}: first wait {w1:?}, T {t:?}, {since:?} in"
            );
            assert!(
                within_after(w2, 2 * t, since),
                "{what} {algorithm}: second wait {w2:?}, {since:?} in"
            );
            let (t1, t2) = (first.slot().expect("slot"), second.slot().expect("slot"));
            assert_eq!(
                t2.ticket() - t1.ticket(),
                t.as_micros() as u64,
                "{what} {algorithm}"
            );
            let v = limiter.check("p", &key).await.expect("valid");
            let retry = v.retry_after().expect("refused behind the reservations");
            let since = started.elapsed();
            assert!(
                within_after(retry, 3 * t, since),
                "{what} {algorithm}: check waits {retry:?}, {since:?} in"
            );
            assert!(
                !limiter.cancel(&first).await.expect("cancel"),
                "{what} {algorithm}"
            );
            assert!(
                limiter.cancel(&second).await.expect("cancel"),
                "{what} {algorithm}"
            );
            let again = limiter.reserve("p", &key, 1, hour).await.expect("valid");
            assert_eq!(
                again.slot().map(|s| s.ticket()),
                Some(t2.ticket()),
                "{what} {algorithm}: the given-back slot again"
            );
            let request = limiter.prepare(&["p"], &key, 1).expect("valid");
            let k = request.entries()[0].key().clone();
            assert!(pttl_ms(&k) > 0, "{what} {algorithm}: the key expires");
        }
    }
}
