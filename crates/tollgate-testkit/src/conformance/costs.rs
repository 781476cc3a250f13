//! Costs above one unit: charged whole or not at all, mixed per entry, and a cost no limit
//! can ever admit is an error rather than a refusal.

use std::time::Duration;

use tollgate::{Algorithm, CheckError, FakeClock, Limit, Outcome, Quota, Store};

use super::harness::{Harness, five_per_minute, from_store, limit_for, name};
use crate::Fixture;

/// Costs above one are charged in full and refused as a whole.
pub async fn cost_above_one<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, five_per_minute("cost"));
    h.advance(Duration::from_secs(1));
    for a in Algorithm::ALL {
        let n = name("cost", a);
        let v = h.check(&n, "u", 3).await;
        assert!(v.outcome() == Outcome::Allowed, "{n}");
        assert_eq!(v.decision().remaining, 2, "{n}");
        let v = h.check(&n, "u", 3).await;
        assert!(
            v.outcome() != Outcome::Allowed,
            "{n}: 3 more do not fit in 2"
        );
        assert_eq!(
            v.decision().remaining,
            2,
            "{n}: a refused cost is not charged in part"
        );
        let v = h.check(&n, "u", 2).await;
        assert!(v.outcome() == Outcome::Allowed, "{n}: 2 fit in 2");
        assert_eq!(v.decision().remaining, 0, "{n}");
        h.advance(Duration::from_secs(120));
    }
}

/// The algorithm after `a` in [`Algorithm::ALL`] (wrapping), so that mixed-cost requests
/// also mix algorithms.
fn next_algorithm(a: Algorithm) -> Algorithm {
    let all = Algorithm::ALL;
    let i = all.iter().position(|&b| b == a).unwrap_or(0);
    all[(i + 1) % all.len()]
}

/// A request whose entries ask different costs is decided all or nothing, each entry at its
/// own cost: admitted, each is charged its own cost; refused by one, none is charged; each
/// cost is validated against its own limit.
pub async fn mixed_costs_are_all_or_nothing<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let mut limits = Vec::new();
    for a in Algorithm::ALL {
        limits.push(limit_for("mixa", a, 10, Duration::from_secs(60)));
        limits.push(limit_for("mixb", a, 5, Duration::from_secs(60)));
    }
    let h = Harness::new(clock, fixture, limits);
    h.advance(Duration::from_secs(1));
    let user: &[(&str, &str)] = &[("user", "u")];
    for a in Algorithm::ALL {
        let big = name("mixa", a);
        let small = name("mixb", next_algorithm(a));
        let ctx = format!("{big} + {small}");
        let check = |cost_big: u64, cost_small: u64| {
            let (h, big, small) = (&h, big.clone(), small.clone());
            async move {
                h.check_costed(&[(&big, user, cost_big), (&small, user, cost_small)])
                    .await
                    .expect("valid")
            }
        };
        let v = check(4, 2).await;
        from_store(&v, &ctx);
        assert!(v.outcome() == Outcome::Allowed, "{ctx}: {v:?}");
        let left: Vec<u64> = v.decisions().iter().map(|d| d.decision.remaining).collect();
        assert_eq!(left, [6, 3], "{ctx}: each charged its own cost");
        let v = check(4, 2).await;
        assert!(v.outcome() == Outcome::Allowed, "{ctx}: {v:?}");
        // 2 and 1 left: the small limit refuses 2, so the big one is not charged its 1.
        let v = check(1, 2).await;
        from_store(&v, &ctx);
        assert!(v.outcome() != Outcome::Allowed, "{ctx}: 2 > 1 left");
        assert!(v.decisions()[0].decision.is_allowed(), "{ctx}: 1 ≤ 2 alone");
        assert!(!v.decisions()[1].decision.is_allowed(), "{ctx}");
        assert_eq!(h.peek(&big, "u", 1).await.decision().remaining, 2, "{ctx}");
        assert_eq!(
            h.peek(&small, "u", 1).await.decision().remaining,
            1,
            "{ctx}"
        );
        // Both fit exactly.
        let v = check(2, 1).await;
        assert!(v.outcome() == Outcome::Allowed, "{ctx}: {v:?}");
        let left: Vec<u64> = v.decisions().iter().map(|d| d.decision.remaining).collect();
        assert_eq!(left, [0, 0], "{ctx}");
        // Validated per entry, naming the limit whose capacity the cost exceeds.
        let err = h
            .check_costed(&[(&big, user, 10), (&small, user, 6)])
            .await
            .expect_err("6 > capacity 5");
        assert!(
            matches!(&err, CheckError::CostExceedsCapacity { limit, cost: 6, capacity: 5 } if *limit == small),
            "{ctx}: {err}"
        );
        let err = h
            .check_costed(&[(&big, user, 0), (&small, user, 1)])
            .await
            .expect_err("cost 0");
        assert!(matches!(err, CheckError::ZeroCost), "{ctx}: {err}");
        h.advance(Duration::from_secs(120));
    }
}

/// Concurrent requests of mixed costs admit exactly what fits in the tighter limit, and the
/// other limit is charged for the admitted requests only.
pub async fn mixed_costs_exact_under_concurrent_tasks<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let mut limits = Vec::new();
    for a in Algorithm::ALL {
        limits.push(limit_for("mixrace", a, 100, Duration::from_secs(60)));
        limits.push(limit_for("mixtight", a, 30, Duration::from_secs(60)));
    }
    let h = std::sync::Arc::new(Harness::new(clock, fixture, limits));
    for a in Algorithm::ALL {
        let wide = name("mixrace", a);
        let tight = name("mixtight", next_algorithm(a));
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (h, wide, tight) = (h.clone(), wide.clone(), tight.clone());
                tokio::spawn(async move {
                    let user: &[(&str, &str)] = &[("user", "u")];
                    h.check_costed(&[(&wide, user, 2), (&tight, user, 3)])
                        .await
                        .expect("valid")
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            let v = t.await.expect("task");
            from_store(&v, &wide);
            admitted += u64::from(v.outcome() == Outcome::Allowed);
        }
        assert_eq!(admitted, 10, "{wide} + {tight}: 10 × 3 fit in 30");
        assert_eq!(
            h.peek(&wide, "u", 1).await.decision().remaining,
            100 - 2 * 10,
            "{wide}: charged for the admitted requests only"
        );
    }
}

/// A cost the limit can never admit is an error, not a denial; so is cost 0.
pub async fn cost_too_large_is_an_error<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let mut limits = five_per_minute("big");
    limits.push(
        Limit::new(
            "burst2",
            Algorithm::Gcra,
            Quota::per_minute(5)
                .and_then(|q| q.with_burst(2))
                .expect("valid"),
        )
        .expect("valid"),
    );
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let n = name("big", a);
        let err = h
            .limiter
            .check_n(&n, &[("user", "u")], 6)
            .await
            .expect_err("cost 6 > limit 5");
        assert!(
            matches!(
                err,
                CheckError::CostExceedsCapacity {
                    cost: 6,
                    capacity: 5,
                    ..
                }
            ),
            "{n}: {err}"
        );
        let err = h
            .limiter
            .check_n(&n, &[("user", "u")], 0)
            .await
            .expect_err("cost 0");
        assert!(matches!(err, CheckError::ZeroCost), "{n}: {err}");
        let v = h.peek(&n, "u", 1).await;
        assert_eq!(
            v.decision().remaining,
            5,
            "{n}: an invalid cost changed the state"
        );
    }
    let err = h
        .limiter
        .check_n("burst2", &[("user", "u")], 3)
        .await
        .expect_err("over burst");
    assert!(
        matches!(err, CheckError::CostExceedsCapacity { capacity: 2, .. }),
        "{err}"
    );
}
