//! The basic contract: a fresh key admits exactly its limit, a refusal or a peek changes
//! nothing, a reset forgets, keys are independent.

use std::time::Duration;

use tollgate::{Algorithm, FakeClock, Outcome, Store};

use super::harness::{Harness, five_per_minute, from_store, limit_for, name};
use crate::Fixture;

/// A fresh key admits exactly `limit` unit requests, then refuses.
pub async fn exactly_limit_admitted<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, five_per_minute("exact"));
    for a in Algorithm::ALL {
        let n = name("exact", a);
        for i in 1..=5 {
            let v = h.check(&n, "u", 1).await;
            from_store(&v, &n);
            assert!(
                v.outcome() == Outcome::Allowed,
                "{n}: request {i} of 5 refused: {v:?}"
            );
        }
        for i in 0..10 {
            let v = h.check(&n, "u", 1).await;
            assert!(
                v.outcome() != Outcome::Allowed,
                "{n}: request {} admitted past the limit",
                6 + i
            );
        }
    }
}

/// Many tasks racing on one key admit exactly the limit.
pub async fn exact_under_concurrent_tasks<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let limits = Algorithm::ALL
        .into_iter()
        .map(|a| limit_for("race", a, 20, Duration::from_secs(60)))
        .collect();
    let h = std::sync::Arc::new(Harness::new(clock, fixture, limits));
    for a in Algorithm::ALL {
        let n = name("race", a);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let h = h.clone();
                let n = n.clone();
                tokio::spawn(async move { h.check(&n, "u", 1).await })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            let v = t.await.expect("task");
            from_store(&v, &n);
            admitted += usize::from(v.outcome() == Outcome::Allowed);
        }
        assert_eq!(admitted, 20, "{n}: 64 concurrent requests, limit 20");
    }
}

/// A refused request leaves the state exactly as it was.
pub async fn denied_calls_change_nothing<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, five_per_minute("deny"));
    h.advance(Duration::from_secs(7));
    for a in Algorithm::ALL {
        let n = name("deny", a);
        for _ in 0..5 {
            assert!(
                h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        h.advance(Duration::from_millis(1500));
        let before = h.peek(&n, "u", 1).await;
        assert!(before.outcome() != Outcome::Allowed, "{n}: exhausted");
        for _ in 0..5 {
            let v = h.check(&n, "u", 1).await;
            assert!(v.outcome() != Outcome::Allowed, "{n}");
            assert_eq!(
                v.decision(),
                before.decision(),
                "{n}: a denial reports the same state"
            );
        }
        let after = h.peek(&n, "u", 1).await;
        assert_eq!(after, before, "{n}: denied calls changed the state");
        // And the refusal did not push the next admission later.
        let wait = before.retry_after().expect("denied");
        h.advance(wait);
        assert!(
            h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
            "{n}: still refused after {wait:?}"
        );
        h.advance(Duration::from_secs(120));
    }
}

/// Peeking never consumes.
pub async fn peek_consumes_nothing<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, five_per_minute("peek"));
    for a in Algorithm::ALL {
        let n = name("peek", a);
        for _ in 0..20 {
            let v = h.peek(&n, "u", 1).await;
            from_store(&v, &n);
            assert!(v.outcome() == Outcome::Allowed, "{n}");
            assert_eq!(v.decision().remaining, 5, "{n}: peek consumed");
        }
        assert!(
            h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
            "{n}"
        );
        let v = h.peek(&n, "u", 5).await;
        assert!(
            v.outcome() != Outcome::Allowed,
            "{n}: 5 more do not fit after one"
        );
        assert_eq!(v.decision().remaining, 4, "{n}");
        for _ in 0..4 {
            assert!(
                h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        assert!(
            h.check(&n, "u", 1).await.outcome() != Outcome::Allowed,
            "{n}"
        );
    }
}

/// Reset forgets a key's state (and only that key's).
pub async fn reset_forgets_the_key<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, five_per_minute("reset"));
    for a in Algorithm::ALL {
        let n = name("reset", a);
        for _ in 0..5 {
            assert!(
                h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
            assert!(
                h.check(&n, "other", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        assert!(
            h.check(&n, "u", 1).await.outcome() != Outcome::Allowed,
            "{n}"
        );
        let request = h
            .limiter
            .prepare(&[n.as_str()], &[("user", "u")], 1)
            .expect("valid");
        h.limiter.reset(&request).await.expect("reset");
        let v = h.peek(&n, "u", 1).await;
        assert_eq!(v.decision().remaining, 5, "{n}: reset left state behind");
        assert_eq!(v.decision().reset_after, Duration::ZERO, "{n}");
        for _ in 0..5 {
            assert!(
                h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        assert!(
            h.check(&n, "other", 1).await.outcome() != Outcome::Allowed,
            "{n}: reset touched another key"
        );
    }
}

/// Different keys, and different limits on one key, never share state.
pub async fn keys_are_independent<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let mut limits = five_per_minute("one");
    limits.extend(five_per_minute("two"));
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let one = name("one", a);
        let two = name("two", a);
        for _ in 0..5 {
            assert!(
                h.check(&one, "a", 1).await.outcome() == Outcome::Allowed,
                "{one}"
            );
        }
        assert!(
            h.check(&one, "a", 1).await.outcome() != Outcome::Allowed,
            "{one}"
        );
        for user in ["b", "a:", "A", "a}", "{a}"] {
            let v = h.peek(&one, user, 1).await;
            assert_eq!(
                v.decision().remaining,
                5,
                "{one}: user {user:?} shares a's state"
            );
        }
        assert_eq!(h.peek(&two, "a", 1).await.decision().remaining, 5, "{two}");
    }
}
