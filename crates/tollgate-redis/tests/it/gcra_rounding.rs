//! GCRA on a millisecond clock is never more permissive than the exact microsecond rule
//! (issue "Hardening", item 7: one hot key at 100/min admitted 113 where the ceiling was 112,
//! the last admission within 1 ms of a 600 ms step).
//!
//! On the caller's clock the instants are chosen. On Redis's clock they cannot be, so each call
//! runs the script by hand inside `MULTI`, bracketed by `TIME`: the script decided at an instant
//! between the two readings. Between two calls the key's expiry is moved earlier with
//! `PEXPIREAT` by whole milliseconds, which ages its state by exactly that much (the state is
//! the expiry), so the second call sees a chosen step of time added to the real one.

use std::time::Duration;

use redis::Value;
use tollgate::{Algorithm, Entry, Key, Limit, Op, Quota, Request, Store, Timestamp};
use tollgate_redis::ScriptCall;

use crate::common::{redis_store, server, unique_namespace};

/// The quota: 100 per minute, burst 100, one unit per 600 ms.
fn hundred_per_minute() -> Limit {
    Limit::new("g", Algorithm::Gcra, Quota::per_minute(100).expect("valid")).expect("valid")
}

const T_US: u64 = 600_000;

/// Caller's clock: the whole burst taken at the last µs of a millisecond; one unit is refused
/// 1 µs before the next step, with a wait of 1 µs, and admitted at the step itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_clock_admits_exactly_at_the_step() {
    let store = redis_store().await;
    let limit = hundred_per_minute();
    let key = Key::new(&unique_namespace("gcra-step"), &limit, &[("user", "1")]);
    let request = |cost| Request::new([Entry::new(&limit, key.clone())], cost).expect("valid");
    let t1 = 1_893_456_000_000_999_u64;
    let at = |us| Some(Timestamp::from_micros(us));
    let d = store
        .decide(&request(100), Op::Check, at(t1))
        .await
        .expect("check")[0];
    assert!(d.is_allowed() && d.remaining == 0, "{d:?}");
    let d = store
        .decide(&request(1), Op::Check, at(t1 + T_US - 1))
        .await
        .expect("check")[0];
    assert!(!d.is_allowed(), "admitted 1 µs before the step: {d:?}");
    assert_eq!(d.retry_after(), Some(Duration::from_micros(1)), "{d:?}");
    let d = store
        .decide(&request(1), Op::Check, at(t1 + T_US))
        .await
        .expect("check")[0];
    assert!(d.is_allowed(), "refused at the step: {d:?}");
    let d = store
        .decide(&request(1), Op::Check, at(t1 + T_US))
        .await
        .expect("check")[0];
    assert!(!d.is_allowed(), "admitted twice at one step: {d:?}");
}

/// Redis's clock: the whole burst, then the key aged by one interval minus 1 ms, then one
/// unit. The exact rule admits that unit only if at least 1 ms passed between the two calls;
/// whenever the two `TIME` brackets show less, the script must refuse. Repeated until the
/// calls fell in different milliseconds less than 1 ms apart several times (the case a
/// millisecond clock gets wrong); aged by one interval plus 2 ms instead, the unit passes
/// (the script errs by at most 2 ms).
#[test]
fn servers_clock_never_admits_before_the_exact_rule() {
    let limit = hundred_per_minute();
    let burst = ScriptCall::check(&limit, 100);
    let one = ScriptCall::check(&limit, 1);
    let mut con = redis::Client::open(server().url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    for call in [&burst, &one] {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(call.source)
            .query(&mut con)
            .expect("load");
        assert_eq!(sha, call.sha);
    }
    let ns = unique_namespace("gcra-ms");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (mut critical, mut attempts) = (0, 0);
    while critical < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {critical} of {attempts} attempts had both calls in different ms less than 1 ms apart"
        );
        attempts += 1;
        let key = Key::new(&ns, &limit, &[("user", attempts.to_string())]);
        let (a, first, b, expiry) = bracketed(&mut con, &key, &burst, None);
        assert!(first >= 0, "the burst was refused: {first}");
        let (c, second, d, _) = bracketed(&mut con, &key, &one, Some(expiry - 599));
        if d - a < 1_000 {
            assert!(
                second < 0,
                "attempt {attempts}: admitted a unit {} µs after the burst plus one interval \
                 minus 1 ms: the exact rule waits 1 ms (TIME {a}, {b}, {c}, {d}; reply {second})",
                d - a
            );
            if c / 1_000 > b / 1_000 {
                critical += 1;
            }
        }
        // Refused (nothing charged), the key aged by one interval plus 2 ms from the burst
        // instead: the unit was due 2 ms ago at the latest, and the script errs by no more.
        if second < 0 {
            let (_, third, _, _) = bracketed(&mut con, &key, &one, Some(expiry - 602));
            assert!(
                third >= 0,
                "attempt {attempts}: refused 2 ms after the step: {third}"
            );
        }
    }
}

/// In one `MULTI`: `TIME`, optionally `PEXPIREAT key at_ms`, the script, `TIME`,
/// `PEXPIRETIME key`. Returns both instants (µs), the script's one-integer reply and the key's
/// expiry (ms since the epoch) after it.
fn bracketed(
    con: &mut redis::Connection,
    key: &Key,
    call: &ScriptCall,
    expire_at_ms: Option<i64>,
) -> (u64, i64, u64, i64) {
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("TIME");
    if let Some(at) = expire_at_ms {
        pipe.cmd("PEXPIREAT").arg(key.as_str()).arg(at).ignore();
    }
    pipe.cmd("EVALSHA")
        .arg(call.sha)
        .arg(1)
        .arg(key.as_str())
        .arg(&call.args)
        .cmd("TIME")
        .cmd("PEXPIRETIME")
        .arg(key.as_str());
    let (t0, reply, t1, expiry): ((u64, u64), Value, (u64, u64), i64) =
        pipe.query(con).unwrap_or_else(|e| panic!("MULTI: {e}"));
    let Value::Int(reply) = reply else {
        panic!("GCRA's script answered {reply:?}")
    };
    let us = |(s, u): (u64, u64)| s * 1_000_000 + u;
    (us(t0), reply, us(t1), expiry)
}

/// Redis's clock: a whole burst asked for at once (ten checks pipelined on one connection, so
/// Redis runs them back to back, most often within one millisecond) passes whole, as on a µs
/// clock: the script refuses the last unit until the next millisecond (it cannot tell the
/// burst's first call was in this one), and the store asks again then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_within_one_millisecond_passes_whole() {
    let store = redis_store().await;
    let limit = Limit::new(
        "g",
        Algorithm::Gcra,
        Quota::new(10, Duration::from_secs(3_600)).expect("valid"),
    )
    .expect("valid");
    let ns = unique_namespace("gcra-burst");
    for round in 0..5 {
        let key = Key::new(&ns, &limit, &[("user", round.to_string())]);
        let calls = (0..10).map(|_| {
            let (store, limit, key) = (store.clone(), limit.clone(), key.clone());
            tokio::spawn(async move {
                let request = Request::new([Entry::new(&limit, key)], 1).expect("valid");
                store
                    .decide(&request, Op::Check, None)
                    .await
                    .expect("check")[0]
            })
        });
        let mut admitted = 0;
        for call in calls.collect::<Vec<_>>() {
            admitted += u64::from(call.await.expect("task").is_allowed());
        }
        assert_eq!(admitted, 10, "round {round}");
        let request = Request::new([Entry::new(&limit, key)], 1).expect("valid");
        let d = store
            .decide(&request, Op::Check, None)
            .await
            .expect("check")[0];
        assert!(!d.is_allowed(), "round {round}: an eleventh passed: {d:?}");
    }
}

/// Redis's clock, a whole-ms interval (20/s, burst 1, the audit's): a reservation with
/// max_wait 0 on a full key is taken with a wait of 0. The script rounds the tat it stores up
/// to the ms, and answered the wait from that rounded tat (844 µs in the audit): a granted
/// slot must begin within max_wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_clock_reserves_within_a_zero_max_wait() {
    let store = redis_store().await;
    let quota = Quota::per_second(20)
        .expect("valid")
        .with_burst(1)
        .expect("valid");
    let limit = Limit::new("p", Algorithm::Gcra, quota).expect("valid");
    let namespace = unique_namespace("pace-zero");
    for i in 0..20 {
        let user = i.to_string();
        let key = Key::new(&namespace, &limit, &[("user", user.as_str())]);
        let entry = Entry::new(&limit, key);
        let reserve = |max_wait| tollgate::Pace::Reserve { max_wait };
        let paced = store
            .pace(&entry, reserve(Duration::ZERO), None)
            .await
            .expect("reserve");
        let slot = paced.slot.expect("a full key's slot is now");
        assert_eq!(slot.wait(), Duration::ZERO, "key {i}: {paced:?}");
        // The next slot is an interval on: refused within 0, taken within 60 ms.
        let paced = store
            .pace(&entry, reserve(Duration::ZERO), None)
            .await
            .expect("reserve");
        assert!(paced.slot.is_none(), "{paced:?}");
        let paced = store
            .pace(&entry, reserve(Duration::from_millis(60)), None)
            .await
            .expect("reserve");
        let wait = paced.slot.expect("within 60 ms").wait();
        assert!(wait <= Duration::from_millis(60), "{paced:?}");
    }
}
