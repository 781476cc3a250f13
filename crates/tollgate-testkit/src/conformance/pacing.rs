//! Pacing and settling (`tollgate::Pace`): reservations take consecutive slots of the
//! limit's schedule, a refused one charges nothing, a cancellation gives back only a slot no
//! later one followed, and settlements charge past the limit or refund, never past full.

use std::time::Duration;

use tollgate::{Algorithm, CheckError, FakeClock, Outcome, Reservation, Store};

use super::harness::{Harness, five_per_minute, from_store, limit_for, name};
use crate::Fixture;

const SCHEDULED: [Algorithm; 2] = [Algorithm::Gcra, Algorithm::TokenBucket];
const HOUR: Duration = Duration::from_secs(3_600);
const T: Duration = Duration::from_secs(10);

/// 6 per minute (T = 10 s), burst 6, per scheduled algorithm.
fn six_per_minute(prefix: &str) -> Vec<tollgate::Limit> {
    SCHEDULED
        .into_iter()
        .map(|a| limit_for(prefix, a, 6, Duration::from_secs(60)))
        .collect()
}

async fn reserve<S: Store>(h: &Harness<S>, limit: &str, max_wait: Duration) -> Reservation {
    let r = h
        .limiter
        .reserve(limit, &[("user", "u")], 1, max_wait)
        .await
        .unwrap_or_else(|e| panic!("reserve {limit}: {e}"));
    assert!(r.store_error().is_none(), "{limit}: the store failed");
    r
}

/// The burst goes now; each next reservation waits one interval more than the last; one
/// whose slot lies beyond its `max_wait` is refused with the wait after which it would be
/// taken, and charges nothing; a check meanwhile is refused until the slots are past.
pub async fn reservations_take_consecutive_slots<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, six_per_minute("slots"));
    for a in SCHEDULED {
        let n = name("slots", a);
        for i in 0..6 {
            assert_eq!(
                reserve(&h, &n, HOUR).await.wait(),
                Some(Duration::ZERO),
                "{n} #{i}"
            );
        }
        assert_eq!(reserve(&h, &n, HOUR).await.wait(), Some(T), "{n}: 7th");
        assert_eq!(reserve(&h, &n, HOUR).await.wait(), Some(2 * T), "{n}: 8th");
        let refused = reserve(&h, &n, Duration::from_secs(25)).await;
        assert_eq!(refused.wait(), None, "{n}: a slot 30 s away is beyond 25 s");
        assert_eq!(
            refused.outcome(),
            Outcome::Limited {
                retry_after: Duration::from_secs(5)
            },
            "{n}: in 5 s the next slot is 25 s away"
        );
        assert_eq!(
            reserve(&h, &n, HOUR).await.wait(),
            Some(3 * T),
            "{n}: the refusal took no slot"
        );
        let v = h.check(&n, "u", 1).await;
        from_store(&v, &n);
        assert_eq!(
            v.retry_after(),
            Some(4 * T),
            "{n}: a check waits behind every reservation"
        );
        h.advance(Duration::from_secs(30));
        assert_eq!(
            reserve(&h, &n, HOUR).await.wait(),
            Some(T),
            "{n}: 30 s later, 6 intervals still owed"
        );
        h.advance(HOUR);
    }
}

/// Reservations by many concurrent tasks get distinct, consecutive slots: the sorted waits
/// are exactly the limit's schedule, with no slot given twice and none skipped.
pub async fn concurrent_reservations_are_the_schedule<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let h = std::sync::Arc::new(Harness::new(clock, fixture, six_per_minute("sched")));
    for a in SCHEDULED {
        let n = name("sched", a);
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let (h, n) = (h.clone(), n.clone());
                tokio::spawn(async move { reserve(&h, &n, HOUR).await.wait() })
            })
            .collect();
        let mut waits = Vec::new();
        for t in tasks {
            waits.push(t.await.expect("task").expect("a slot within the hour"));
        }
        waits.sort();
        let expected: Vec<Duration> = (0..40u32).map(|i| T * i.saturating_sub(5)).collect();
        assert_eq!(waits, expected, "{n}");
        h.advance(2 * HOUR);
    }
}

/// A cancellation gives the units back only when no later slot was handed out: the last
/// reservation's slot returns (the next one gets it again), an earlier one's is lost.
pub async fn cancel_gives_back_only_the_last_slot<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, six_per_minute("cancel"));
    for a in SCHEDULED {
        let n = name("cancel", a);
        for _ in 0..6 {
            let _ = reserve(&h, &n, HOUR).await;
        }
        let first = reserve(&h, &n, HOUR).await;
        let second = reserve(&h, &n, HOUR).await;
        assert_eq!(second.wait(), Some(2 * T), "{n}");
        assert!(
            !h.limiter.cancel(&first).await.expect("cancel"),
            "{n}: a later slot followed"
        );
        assert!(
            h.limiter.cancel(&second).await.expect("cancel"),
            "{n}: the last slot"
        );
        assert!(
            !h.limiter.cancel(&second).await.expect("cancel"),
            "{n}: given back once"
        );
        assert_eq!(
            reserve(&h, &n, HOUR).await.wait(),
            Some(2 * T),
            "{n}: the given-back slot is handed out again"
        );
        h.advance(HOUR);
    }
}

/// The window algorithms have no future slot to hand out: a reservation is an error that
/// says so, and charges nothing.
pub async fn window_algorithms_cannot_reserve<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, five_per_minute("nores"));
    for a in [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow { buckets: 60 },
    ] {
        let n = name("nores", a);
        let e = h
            .limiter
            .reserve(&n, &[("user", "u")], 1, HOUR)
            .await
            .expect_err("a window cannot reserve");
        assert!(matches!(e, CheckError::CannotReserve { .. }), "{n}: {e}");
        assert_eq!(h.peek(&n, "u", 1).await.decision().remaining, 5, "{n}");
    }
}

/// A settlement charges past the limit (a debt checks are refused behind) and refunds what
/// the key still counts, never past a full quota, and never units already replenished.
pub async fn adjust_charges_debt_and_refunds_within_full<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let h = Harness::new(clock, fixture, five_per_minute("adjust"));
    h.advance(Duration::from_secs(1));
    for a in Algorithm::ALL {
        let n = name("adjust", a);
        let key = [("user", "u")];
        assert_eq!(h.check(&n, "u", 2).await.outcome(), Outcome::Allowed, "{n}");
        let after = h.limiter.adjust(&n, &key, 5).await.expect("charge");
        assert_eq!(after.remaining, 0, "{n}: 7 units charged of 5");
        let v = h.check(&n, "u", 1).await;
        assert!(
            v.outcome() != Outcome::Allowed,
            "{n}: refused behind the debt"
        );
        let after = h.limiter.adjust(&n, &key, -5).await.expect("refund");
        assert_eq!(after.remaining, 3, "{n}: back to 2 used");
        let after = h.limiter.adjust(&n, &key, -5).await.expect("refund");
        assert_eq!(after.remaining, 5, "{n}: a refund stops at full");
        assert_eq!(h.check(&n, "u", 5).await.outcome(), Outcome::Allowed, "{n}");
        assert!(
            h.check(&n, "u", 1).await.outcome() != Outcome::Allowed,
            "{n}: exactly 5"
        );
        // Units that already replenished are not refunded again.
        h.advance(Duration::from_secs(120));
        let after = h.limiter.adjust(&n, &key, -5).await.expect("refund");
        assert_eq!(after.remaining, 5, "{n}");
        assert_eq!(h.check(&n, "u", 5).await.outcome(), Outcome::Allowed, "{n}");
        assert!(
            h.check(&n, "u", 1).await.outcome() != Outcome::Allowed,
            "{n}: a refund of replenished units created no capacity"
        );
        let e = h
            .limiter
            .adjust(&n, &key, 6)
            .await
            .expect_err("beyond capacity");
        assert!(matches!(e, tollgate::SettleError::Check(_)), "{n}: {e}");
        h.advance(Duration::from_secs(120));
    }
}

/// Settlements owe at most one capacity beyond empty, beyond room for an hour's queue of
/// reservations (`tollgate::rules::DEBT_HORIZON_US`): 1000 charges of the whole capacity (10
/// of 10 per hour, one a second) leave every key refused for at most three periods (two for
/// the sliding log, which queues nothing) and full again after them (they used to owe 1000
/// capacities: refused, and kept, for 41 days). GCRA's `tat` stops at `now + 2 × burst × T +
/// 1 h`, the token bucket at `−burst − 10` tokens (an hour is 10 intervals of 6 min), the
/// sliding log at `2 × limit` live entries: three refunds of the capacity bring the first two
/// back to full, two the sliding log; the windows' counters end with their window anyway.
pub async fn adjust_debt_is_capped_at_one_capacity<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let limits = Algorithm::ALL
        .into_iter()
        .map(|a| limit_for("debt", a, 10, HOUR))
        .collect();
    let h = Harness::new(clock, fixture, limits);
    // The sliding window (60 buckets of 1 min) counts a bucket until it leaves the span.
    let cap = 3 * HOUR + Duration::from_secs(60);
    for a in Algorithm::ALL {
        let n = name("debt", a);
        for user in ["u", "v"] {
            let key = [("user", user)];
            for i in 0..1000 {
                let after = h.limiter.adjust(&n, &key, 10).await.expect("charge");
                assert!(
                    after.reset_after <= cap,
                    "{n}/{user} charge #{i}: reset after {:?}",
                    after.reset_after
                );
                h.advance(Duration::from_secs(1));
            }
        }
        let v = h.check(&n, "u", 1).await;
        from_store(&v, &n);
        match v.outcome() {
            Outcome::Limited { retry_after } => {
                assert!(retry_after <= cap, "{n}: refused for {retry_after:?}");
            }
            other => panic!("{n}: refused behind the debt, not {other:?}"),
        }
        assert!(
            v.decision().reset_after <= cap,
            "{n}: reset after {:?}",
            v.decision().reset_after
        );
        let refunds = match a {
            Algorithm::Gcra | Algorithm::TokenBucket => 3,
            Algorithm::SlidingLog => 2,
            _ => 0,
        };
        let key = [("user", "v")];
        for i in 1..refunds {
            let after = h.limiter.adjust(&n, &key, -10).await.expect("refund");
            assert_eq!(after.remaining, 0, "{n}: still owed after refund {i}");
        }
        if refunds > 0 {
            let after = h.limiter.adjust(&n, &key, -10).await.expect("refund");
            assert_eq!(after.remaining, 10, "{n}: no more than that was owed");
        }
        h.advance(cap);
        let v = h.check(&n, "u", 1).await;
        from_store(&v, &n);
        assert_eq!(v.outcome(), Outcome::Allowed, "{n}: three periods later");
        assert_eq!(
            v.decision().remaining,
            9,
            "{n}: full again three periods later"
        );
    }
}

/// A settlement on a queue of reservations is counted on top of it: after 40 reservations
/// (340 s past the burst of 6 per minute), a charge of 6 moves the schedule on by six
/// slots, and the next reservation is the 47th slot. (A cap of one capacity from now
/// forgave it: reserve-then-settle would have let the upstream see more than the rate.) A
/// queue deeper than the horizon can no longer be reserved: a `max_wait` above the hour
/// (which built one, 400 reservations of a 2 h `max_wait`) is `CheckError::MaxWaitTooLong`,
/// charging nothing.
pub async fn adjust_keeps_reservations_beyond_the_cap<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let h = Harness::new(clock, fixture, six_per_minute("queue"));
    for a in SCHEDULED {
        let n = name("queue", a);
        for _ in 0..40 {
            let _ = reserve(&h, &n, HOUR).await;
        }
        let after = h
            .limiter
            .adjust(&n, &[("user", "u")], 6)
            .await
            .expect("charge");
        assert_eq!(
            after.reset_after,
            46 * T,
            "{n}: the queue and the settlement"
        );
        assert_eq!(reserve(&h, &n, HOUR).await.wait(), Some(41 * T), "{n}");
        h.advance(3 * HOUR);
        let error = h
            .limiter
            .reserve(&n, &[("user", "u")], 1, 2 * HOUR)
            .await
            .expect_err("a max_wait above the hour");
        assert!(
            matches!(error, CheckError::MaxWaitTooLong { .. }),
            "{n}: {error}"
        );
        assert_eq!(
            reserve(&h, &n, HOUR).await.wait(),
            Some(Duration::ZERO),
            "{n}: nothing was charged"
        );
        h.advance(3 * HOUR);
    }
}
