//! The state `lua/pace.lua` leaves in a key: a sliding window's hash stays within its
//! `buckets + 1` fields however many charges settle on it, settlements owe at most one
//! capacity beyond empty and an hour's queue (every key's expiry within three periods here, a sliding log within
//! `2 × limit` members), and GCRA's state on the server's clock, read from the key's expiry,
//! reads back exactly what was written.

use std::time::Duration;

use tollgate::{Algorithm, FakeClock, Limit, Limiter, Outcome, Quota, Timestamp};
use tollgate_redis::RedisStore;

use crate::common::{redis_store, server, unique_namespace};

/// The number of fields of the hash at `key`.
fn hlen(key: &str) -> usize {
    let mut con = redis::Client::open(server().url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    redis::cmd("HLEN")
        .arg(key)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("HLEN {key}: {e}"))
}

/// `cmd key` on the shared server, as an integer (`PTTL`, `ZCARD`).
fn int_of(cmd: &str, key: &str) -> i64 {
    let mut con = redis::Client::open(server().url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    redis::cmd(cmd)
        .arg(key)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("{cmd} {key}: {e}"))
}

/// The Redis key of `limit` for `key` on `limiter`.
fn redis_key(limiter: &Limiter<RedisStore>, limit: &str, key: &[(&str, &str)]) -> String {
    let request = limiter.prepare(&[limit], key, 1).expect("valid");
    request.entries()[0].key().as_str().to_owned()
}

/// Charges settled on a sliding window over time (10 buckets of 100 ms, on a fake clock), the
/// key kept over its limit so that every check between them is refused and writes nothing:
/// each charge drops the buckets that left the window, as an admitted check does, so the hash
/// never holds more than `buckets + 1` fields (it grew by one field a charge, without bound).
/// Refunds between them (which write to live buckets) keep it bounded too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_charges_drop_stale_buckets() {
    const BUCKETS: usize = 10;
    let clock = FakeClock::new(Timestamp::from_micros(1_700_000_000_000_000));
    let limit = Limit::new(
        "sw",
        Algorithm::SlidingWindow {
            buckets: u32::try_from(BUCKETS).expect("small"),
        },
        Quota::per_second(10).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid");
    let limiter = Limiter::builder(redis_store().await)
        .namespace(unique_namespace("sw-pace-prune"))
        .limit(limit)
        .clock(clock.clone())
        .build()
        .expect("valid");
    let key = [("user", "1")];
    let hash = redis_key(&limiter, "sw", &key);
    for i in 0..50 {
        if i % 3 == 2 {
            let _ = limiter.adjust("sw", &key, -1).await.expect("refund");
        }
        let charged = limiter.adjust("sw", &key, 10).await.expect("charge");
        assert_eq!(charged.remaining, 0, "step {i}: {charged:?}");
        let v = limiter.check("sw", &key).await.expect("valid");
        assert!(
            matches!(v.outcome(), Outcome::Limited { .. }),
            "step {i}: the key stays over its limit: {:?}",
            v.outcome()
        );
        let fields = hlen(&hash);
        assert!(
            fields <= BUCKETS + 1,
            "step {i}: {fields} fields, more than buckets + 1"
        );
        clock.advance(Duration::from_millis(100));
    }
    // Past the window, a refund finds nothing live; a charge leaves its one bucket.
    clock.advance(Duration::from_secs(2));
    let _ = limiter.adjust("sw", &key, -5).await.expect("refund");
    let _ = limiter.adjust("sw", &key, 3).await.expect("charge");
    assert_eq!(hlen(&hash), 1, "only the new bucket is left");
    let v = limiter.check("sw", &key).await.expect("valid");
    assert_eq!(v.outcome(), Outcome::Allowed);
}

/// 1000 settlements of the whole capacity (10 of 10 per hour) on the server's clock, per
/// algorithm: the key's expiry stays within two periods and the hour of room for queued
/// reservations (plus the sliding window's bucket and the second of slack every expiry has)
/// and a sliding log within `2 × limit` members.
/// They used to add up: GCRA's and the token bucket's keys expired in 41 days, and the
/// sliding log held 10 000 members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_keep_keys_within_three_periods() {
    let hour = Duration::from_secs(3_600);
    let limits: Vec<Limit> = Algorithm::ALL
        .into_iter()
        .map(|a| {
            Limit::new(a.key_tag(), a, Quota::new(10, hour).expect("valid"))
                .expect("valid")
                .keyed_by(["user"])
                .expect("valid")
        })
        .collect();
    let limiter = Limiter::builder(redis_store().await)
        .namespace(unique_namespace("pace-debt"))
        .limits(limits)
        .build()
        .expect("valid");
    let key = [("user", "1")];
    let most = i64::try_from((3 * hour + Duration::from_secs(61)).as_millis()).expect("small");
    for a in Algorithm::ALL {
        let n = a.key_tag();
        for _ in 0..1_000 {
            let _ = limiter.adjust(n, &key, 10).await.expect("charge");
        }
        let k = redis_key(&limiter, n, &key);
        let pttl = int_of("PTTL", &k);
        assert!(
            (0..=most).contains(&pttl),
            "{n}: PTTL {pttl} ms, more than three periods"
        );
        if a == Algorithm::SlidingLog {
            let members = int_of("ZCARD", &k);
            assert!(members <= 20, "{n}: {members} members");
        }
        let v = limiter.check(n, &key).await.expect("valid");
        assert!(
            matches!(v.outcome(), Outcome::Limited { retry_after } if retry_after <= 3 * hour),
            "{n}: {:?}",
            v.outcome()
        );
    }
}

/// GCRA on the server's clock keeps its state in the key's expiry; `lua/pace.lua` reads it
/// back as an absolute instant (from `PTTL`, which counts from Redis's own ms clock, not from
/// the script's `TIME`). A reservation then its cancellation, many times over a standing
/// reservation, must read the state exactly each time: every cancellation gives its slot
/// back and every reservation gets the same ticket. A read off by a ms where the two clocks'
/// ms differ would make a cancellation miss (its ticket no longer the key's state) or move
/// the ticket. For T a whole number of ms and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_reservations_read_the_expiry_exactly() {
    // 10 per hour (T = 360 s) and 7 per hour (T = 514 285 715 µs): long enough that the
    // state stays ahead of the real time the loop takes.
    let hour = Duration::from_secs(3_600);
    for (per_hour, what) in [(10, "pace-read-whole"), (7, "pace-read-sub-ms")] {
        let limit = Limit::new(
            "p",
            Algorithm::Gcra,
            Quota::new(per_hour, hour).expect("valid"),
        )
        .expect("valid")
        .keyed_by(["user"])
        .expect("valid");
        let limiter = Limiter::builder(redis_store().await)
            .namespace(unique_namespace(what))
            .limit(limit)
            .build()
            .expect("valid");
        let key = [("user", "1")];
        // Past the burst, so that every reservation below waits, and the key is never full.
        for _ in 0..=per_hour {
            let r = limiter.reserve("p", &key, 1, hour).await.expect("valid");
            assert!(r.slot().is_some(), "{what}: {:?}", r.outcome());
        }
        let mut ticket = None;
        for i in 0..1_000 {
            let r = limiter.reserve("p", &key, 1, hour).await.expect("valid");
            let slot = r
                .slot()
                .unwrap_or_else(|| panic!("{what} {i}: {:?}", r.outcome()));
            assert!(r.wait().is_some_and(|w| w > Duration::ZERO), "{what} {i}");
            let t = *ticket.get_or_insert(slot.ticket());
            assert_eq!(slot.ticket(), t, "{what} {i}: the same slot each time");
            assert!(
                limiter.cancel(&r).await.expect("cancel"),
                "{what} {i}: the slot was given back"
            );
        }
    }
}
