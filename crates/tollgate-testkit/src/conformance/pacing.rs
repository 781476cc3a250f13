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
