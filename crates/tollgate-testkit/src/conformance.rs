//! The store conformance suite: one set of behaviours every [`Store`] must show, written
//! once and run unchanged against the memory store, Redis and Redis Cluster.
//!
//! Use it from a store crate's integration tests:
//! ```text
//! async fn fixture(clock: tollgate::FakeClock) -> tollgate_testkit::Fixture<MyStore> { ... }
//! tollgate_testkit::conformance_suite!(fixture);
//! ```
//! The macro expands to one `#[tokio::test]` per behaviour below (the caller needs `tokio`
//! with `macros` and `rt-multi-thread`). Every check goes through a [`Limiter`] built with the
//! test's [`FakeClock`], so stores are always given an explicit `now` and time moves only when a
//! test advances it. Periods are minutes long: a Redis key's real TTL then always outlives the
//! few real milliseconds a test takes.

use std::time::Duration;

use tollgate::{
    Algorithm, CheckError, Clock, FakeClock, Lease, Limit, Limiter, Need, OnStoreError, Op,
    Outcome, Quota, Store, Timestamp, Verdict,
};

use crate::Fixture;

/// Every test's start: 2030-01-01T00:00:00Z, aligned to every window used here.
pub const START: Timestamp = Timestamp::from_micros(1_893_456_000_000_000);

/// Expands to the whole suite for a fixture function
/// `async fn(FakeClock) -> Fixture<impl Store>`.
#[macro_export]
macro_rules! conformance_suite {
    ($fixture:path) => {
        $crate::conformance_suite!(@each $fixture;
            exactly_limit_admitted,
            exact_under_concurrent_tasks,
            denied_calls_change_nothing,
            peek_consumes_nothing,
            reset_forgets_the_key,
            remaining_and_reset_after_track_each_call,
            retry_after_is_exact,
            cost_above_one,
            cost_too_large_is_an_error,
            mixed_costs_are_all_or_nothing,
            mixed_costs_exact_under_concurrent_tasks,
            multi_limit_is_all_or_nothing,
            one_limit_two_keys_is_all_or_nothing,
            keys_are_independent,
            fixed_window_admits_twice_the_limit_across_an_edge,
            sliding_log_never_exceeds_the_limit_in_any_period,
            sliding_window_stays_within_one_bucket_of_exact,
            lease_mode_counts_every_unit_taken,
            any_of_group_refuses_only_when_all_refuse,
            counted_refusals_charge_every_entry,
        );
    };
    (@each $fixture:path; $($test:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let clock = ::tollgate::FakeClock::new($crate::conformance::START);
                let fixture = $fixture(clock.clone()).await;
                $crate::conformance::$test(clock, fixture).await;
            }
        )*
    };
}

/// A limiter over the store under test, with the test's clock.
struct Harness<S> {
    limiter: Limiter<S>,
    clock: FakeClock,
    _guard: Box<dyn std::any::Any + Send + Sync>,
}

impl<S: Store> Harness<S> {
    fn new(clock: FakeClock, fixture: Fixture<S>, limits: Vec<Limit>) -> Harness<S> {
        let limiter = Limiter::builder(fixture.store)
            .namespace(fixture.namespace)
            .clock(clock.clone())
            .limits(limits)
            .build()
            .expect("distinct limit names");
        Harness {
            limiter,
            clock,
            _guard: fixture.guard,
        }
    }

    async fn check(&self, limit: &str, user: &str, cost: u64) -> Verdict {
        self.limiter
            .check_n(limit, &[("user", user)], cost)
            .await
            .unwrap_or_else(|e| panic!("check {limit}/{user} cost {cost}: {e}"))
    }

    async fn peek(&self, limit: &str, user: &str, cost: u64) -> Verdict {
        let request = self
            .limiter
            .prepare(&[limit], &[("user", user)], cost)
            .unwrap_or_else(|e| panic!("peek {limit}/{user}: {e}"));
        self.limiter.decide(&request, Op::Peek).await
    }

    /// A check of several (limit, key) pairs, all or nothing.
    async fn check_keyed(
        &self,
        items: &[(&str, &[(&str, &str)])],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        let request = self.limiter.prepare_keyed(items, cost)?;
        Ok(self.limiter.decide(&request, Op::Check).await)
    }

    /// A check of several (limit, key parts, cost) triples, each at its own cost, all or
    /// nothing.
    async fn check_costed(
        &self,
        items: &[tollgate::CostedLimit<'_, &str>],
    ) -> Result<Verdict, CheckError> {
        let request = self.limiter.prepare_keyed_costs(items)?;
        Ok(self.limiter.decide(&request, Op::Check).await)
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

/// Checks that a verdict came from the store, not from a failure policy.
fn from_store(v: &Verdict, context: &str) {
    assert!(
        v.store_error().is_none(),
        "{context}: the store failed ({:?}); conformance needs a working store",
        v.store_error()
    );
}

/// A per-user limit named after its algorithm, `limit` per `period`.
fn limit_for(prefix: &str, algorithm: Algorithm, limit: u64, period: Duration) -> Limit {
    Limit::new(
        format!("{prefix}-{}", algorithm.key_tag()),
        algorithm,
        Quota::new(limit, period).expect("valid quota"),
    )
    .expect("valid limit")
    .keyed_by(["user"])
    .expect("valid part")
    .on_store_error(OnStoreError::Deny)
}

/// One limit per algorithm: 5 per minute (sliding window: 60 buckets of 1 s).
fn five_per_minute(prefix: &str) -> Vec<Limit> {
    Algorithm::ALL
        .into_iter()
        .map(|a| limit_for(prefix, a, 5, Duration::from_secs(60)))
        .collect()
}

fn name(prefix: &str, algorithm: Algorithm) -> String {
    format!("{prefix}-{}", algorithm.key_tag())
}

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

/// `remaining` and `reset_after` are exact after each call.
pub async fn remaining_and_reset_after_track_each_call<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let h = Harness::new(clock, fixture, five_per_minute("track"));
    // 10 s into a minute-aligned window, on a whole second.
    h.advance(Duration::from_secs(10));
    let s = Duration::from_secs;
    for a in Algorithm::ALL {
        let n = name("track", a);
        for k in 1..=5u32 {
            let v = h.check(&n, "u", 1).await;
            let d = v.decision();
            assert!(d.is_allowed(), "{n}");
            assert_eq!(d.limit, 5, "{n}");
            assert_eq!(d.remaining, u64::from(5 - k), "{n}: after {k}");
            let expected = match a {
                // the window ends 50 s from now
                Algorithm::FixedWindow => s(50),
                // every entry expires one period after now
                Algorithm::SlidingLog => s(60),
                // the current 1 s bucket leaves the 61-bucket span 61 s from now
                Algorithm::SlidingWindow { .. } => s(61),
                // 12 s per unit
                Algorithm::TokenBucket | Algorithm::Gcra => s(12) * k,
            };
            assert_eq!(d.reset_after, expected, "{n}: reset_after after {k}");
            assert_eq!(d.retry_after(), None, "{n}");
        }
        // 12 s later the smooth algorithms have one unit back; the windows do not.
        h.advance(s(12));
        let d = *h.peek(&n, "u", 1).await.decision();
        let (remaining, reset_after) = match a {
            Algorithm::FixedWindow => (0, s(38)),
            Algorithm::SlidingLog => (0, s(48)),
            Algorithm::SlidingWindow { .. } => (0, s(49)),
            Algorithm::TokenBucket | Algorithm::Gcra => (1, s(48)),
        };
        assert_eq!(d.remaining, remaining, "{n}: remaining 12 s later");
        assert_eq!(d.reset_after, reset_after, "{n}: reset_after 12 s later");
        // Back to the same instant in the next algorithm's window.
        h.advance(s(48));
    }
}

/// Denied at `t`, still denied 1 ms before `t + retry_after`, admitted at it.
pub async fn retry_after_is_exact<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let h = Harness::new(clock, fixture, five_per_minute("retry"));
    // Odd offsets, so that nothing lines up by luck.
    for (i, a) in Algorithm::ALL.into_iter().enumerate() {
        let n = name("retry", a);
        h.advance(Duration::from_millis(13_377 + 1_000 * i as u64));
        for _ in 0..3 {
            assert!(
                h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        h.advance(Duration::from_millis(2_501));
        for _ in 0..2 {
            assert!(
                h.check(&n, "u", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        for round in 0..3 {
            // Use up whatever came back, until refused.
            let mut denied = h.check(&n, "u", 1).await;
            for _ in 0..5 {
                if denied.outcome() != Outcome::Allowed {
                    break;
                }
                denied = h.check(&n, "u", 1).await;
            }
            let wait = denied
                .retry_after()
                .unwrap_or_else(|| panic!("{n}: round {round}: expected a denial, got {denied:?}"));
            assert!(wait > Duration::ZERO, "{n}");
            h.advance(wait - Duration::from_millis(1));
            let early = h.check(&n, "u", 1).await;
            assert!(
                early.outcome() != Outcome::Allowed,
                "{n}: admitted 1 ms before retry_after {wait:?}"
            );
            h.advance(Duration::from_millis(1));
            let on_time = h.check(&n, "u", 1).await;
            assert!(
                on_time.outcome() == Outcome::Allowed,
                "{n}: refused at retry_after {wait:?}: {on_time:?}"
            );
        }
        h.advance(Duration::from_secs(120));
    }
}

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

/// Several limits in one check: all are charged, or none is.
pub async fn multi_limit_is_all_or_nothing<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let mut limits = Vec::new();
    for a in Algorithm::ALL {
        let tag = a.key_tag();
        limits.push(
            Limit::new(
                format!("global-{tag}"),
                a,
                Quota::per_minute(3).expect("valid"),
            )
            .expect("valid")
            .keyed_by(Vec::<String>::new())
            .expect("valid"),
        );
        limits.push(limit_for("client", a, 2, Duration::from_secs(60)));
    }
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let global = name("global", a);
        let client = name("client", a);
        let both = [global.as_str(), client.as_str()];
        let check = |user: &'static str| {
            let h = &h;
            async move {
                h.limiter
                    .check_all(&both, &[("user", user)])
                    .await
                    .expect("valid")
            }
        };
        let remaining = |user: &'static str, limit: &str| {
            let h = &h;
            let limit = limit.to_owned();
            async move { h.peek(&limit, user, 1).await.decision().remaining }
        };
        assert!(check("a").await.outcome() == Outcome::Allowed, "{global}");
        assert!(check("a").await.outcome() == Outcome::Allowed, "{global}");
        // "a" is over its client limit: the global limit must not be charged.
        let v = check("a").await;
        from_store(&v, &global);
        assert!(v.outcome() != Outcome::Allowed, "{client}: a's third");
        assert!(
            v.decisions()[0].decision.is_allowed(),
            "{global}: global alone would pass"
        );
        assert!(!v.decisions()[1].decision.is_allowed(), "{client}");
        assert_eq!(
            remaining("a", &global).await,
            1,
            "{global}: charged by a denied check"
        );
        // "b" takes the last global unit.
        assert!(check("b").await.outcome() == Outcome::Allowed, "{global}");
        // "c" is refused by the global limit: c's own limit must not be charged.
        let v = check("c").await;
        assert!(v.outcome() != Outcome::Allowed, "{global}: exhausted");
        assert!(!v.decisions()[0].decision.is_allowed(), "{global}");
        assert!(
            v.decisions()[1].decision.is_allowed(),
            "{client}: c alone would pass"
        );
        assert_eq!(
            remaining("c", &client).await,
            2,
            "{client}: charged by a denied check"
        );
        assert_eq!(remaining("b", &client).await, 1, "{client}");
    }
}

/// One limit over two keys in one check (two clients at once): both charged, or neither.
pub async fn one_limit_two_keys_is_all_or_nothing<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let limits = Algorithm::ALL
        .into_iter()
        .map(|a| limit_for("pair", a, 2, Duration::from_secs(60)))
        .collect();
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let n = name("pair", a);
        let (ka, kb, kc) = ([("user", "a")], [("user", "b")], [("user", "c")]);
        for _ in 0..2 {
            assert!(
                h.check(&n, "a", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        let both: [(&str, &[(&str, &str)]); 2] = [(&n, &ka), (&n, &kb)];
        let v = h.check_keyed(&both, 1).await.expect("valid");
        from_store(&v, &n);
        assert!(v.outcome() != Outcome::Allowed, "{n}: a is exhausted");
        assert_eq!(
            h.peek(&n, "b", 1).await.decision().remaining,
            2,
            "{n}: b charged by a denied check"
        );
        let both: [(&str, &[(&str, &str)]); 2] = [(&n, &kb), (&n, &kc)];
        let v = h.check_keyed(&both, 1).await.expect("valid");
        assert!(
            v.outcome() == Outcome::Allowed,
            "{n}: b and c both have room"
        );
        assert_eq!(h.peek(&n, "b", 1).await.decision().remaining, 1, "{n}");
        assert_eq!(h.peek(&n, "c", 1).await.decision().remaining, 1, "{n}");
        let twice: [(&str, &[(&str, &str)]); 2] = [(&n, &kb), (&n, &kb)];
        let err = h.check_keyed(&twice, 1).await.expect_err("same key twice");
        assert!(matches!(err, CheckError::DuplicateLimit(_)), "{n}: {err}");
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

/// The fixed window lets 2 × limit through across a window edge; the sliding log does not.
pub async fn fixed_window_admits_twice_the_limit_across_an_edge<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let h = Harness::new(clock, fixture, five_per_minute("edge"));
    let fixed = name("edge", Algorithm::FixedWindow);
    let log = name("edge", Algorithm::SlidingLog);
    // 1 ms before the window ends.
    h.advance(Duration::from_millis(59_999));
    let mut admitted = (0, 0);
    for _ in 0..5 {
        admitted.0 += usize::from(h.check(&fixed, "u", 1).await.outcome() == Outcome::Allowed);
        admitted.1 += usize::from(h.check(&log, "u", 1).await.outcome() == Outcome::Allowed);
    }
    h.advance(Duration::from_millis(1));
    for _ in 0..5 {
        admitted.0 += usize::from(h.check(&fixed, "u", 1).await.outcome() == Outcome::Allowed);
        admitted.1 += usize::from(h.check(&log, "u", 1).await.outcome() == Outcome::Allowed);
    }
    assert_eq!(
        admitted,
        (10, 5),
        "(fixed window, sliding log) admitted within 2 ms"
    );
}

/// A deterministic pseudo-random sequence of (gap ms, cost), the same for every store.
fn arrivals(seed: u64, n: usize) -> Vec<(u64, u64)> {
    let mut x = seed;
    let mut next = move || {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    (0..n)
        .map(|_| {
            let r = next();
            let gap = match r % 4 {
                0 => 0,
                1 => r % 300,
                2 => r % 2_000,
                _ => r % 7_000,
            };
            (gap, 1 + (r >> 32) % 2)
        })
        .collect()
}

/// Units admitted in `(t - period, t]` of `history` (time µs, cost).
fn in_window(history: &[(u64, u64)], t: u64, period: u64) -> u64 {
    history
        .iter()
        .filter(|&&(at, _)| at + period > t && at <= t)
        .map(|&(_, c)| c)
        .sum()
}

/// Random arrivals: the sliding log never has more than `limit` in any period, and refuses
/// only when the limit is really reached.
pub async fn sliding_log_never_exceeds_the_limit_in_any_period<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let period = Duration::from_secs(10);
    let limit = limit_for("rand", Algorithm::SlidingLog, 7, period);
    let n = limit.name().to_owned();
    let h = Harness::new(clock, fixture, vec![limit]);
    let p = period.as_micros() as u64;
    let mut history = Vec::new();
    for (gap, cost) in arrivals(7, 400) {
        h.advance(Duration::from_millis(gap));
        let t = h.now().as_micros();
        let exact = in_window(&history, t, p);
        let v = h.check(&n, "u", cost).await;
        from_store(&v, &n);
        assert_eq!(
            v.outcome() == Outcome::Allowed,
            exact + cost <= 7,
            "{n}: at +{} µs with {exact} in the window, cost {cost}: {v:?}",
            t - START.as_micros()
        );
        if v.outcome() == Outcome::Allowed {
            history.push((t, cost));
        }
    }
    for &(t, _) in &history {
        assert!(
            in_window(&history, t, p) <= 7,
            "{n}: more than 7 in a period"
        );
    }
    assert!(
        history.len() > 100,
        "{n}: the sequence exercised admissions"
    );
}

/// Random arrivals: the sliding window never has more than `limit` in any period, and
/// refuses only within one bucket of the exact log's answer.
pub async fn sliding_window_stays_within_one_bucket_of_exact<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let period = Duration::from_secs(10);
    let buckets = 10; // 1 s buckets
    let limit = Limit::new(
        "rand-sw",
        Algorithm::SlidingWindow { buckets },
        Quota::new(7, period).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid");
    let h = Harness::new(clock, fixture, vec![limit]);
    let p = period.as_micros() as u64;
    let width = p / u64::from(buckets);
    let mut history = Vec::new();
    let mut early_refusals = 0;
    for (gap, cost) in arrivals(11, 400) {
        h.advance(Duration::from_millis(gap));
        let t = h.now().as_micros();
        let exact = in_window(&history, t, p);
        let v = h.check("rand-sw", "u", cost).await;
        from_store(&v, "rand-sw");
        if v.outcome() == Outcome::Allowed {
            assert!(
                exact + cost <= 7,
                "admitted over the limit at +{} µs",
                t - START.as_micros()
            );
            history.push((t, cost));
        } else if exact + cost <= 7 {
            // Refused early: only units of the oldest bucket (within one bucket width before
            // the exact window) may explain it.
            early_refusals += 1;
            let lingering: u64 = history
                .iter()
                .filter(|&&(at, _)| at + p <= t && at + p + width > t)
                .map(|&(_, c)| c)
                .sum();
            assert!(
                exact + lingering + cost > 7,
                "refused beyond one bucket's error at +{} µs: exact {exact}, lingering {lingering}",
                t - START.as_micros()
            );
        }
    }
    for &(t, _) in &history {
        assert!(in_window(&history, t, p) <= 7, "more than 7 in a period");
    }
    assert!(history.len() > 100, "the sequence exercised admissions");
    assert!(
        early_refusals > 0,
        "the sequence exercised the quantization error"
    );
}

/// Lease mode (fixed window, 20 a minute, k = 5): the store counts every unit taken (spent or
/// held), never more than the limit; a refusal takes nothing; held units go back on
/// `return_leases`; a lease never carries into the next window.
pub async fn lease_mode_counts_every_unit_taken<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let leased = limit_for("lease", Algorithm::FixedWindow, 20, Duration::from_secs(60))
        .lease(Lease::new().units(5))
        .expect("fixed window");
    let name = leased.name().to_owned();
    let h = Harness::new(clock, fixture, vec![leased]);
    let counted = |v: Verdict| 20 - v.decision().remaining;
    for _ in 0..3 {
        let v = h.check(&name, "a", 1).await;
        from_store(&v, &name);
        assert_eq!(v.outcome(), Outcome::Allowed, "{name}");
    }
    let held = h.limiter.leased_units();
    assert!((1..=5).contains(&held), "{name}: {held} held");
    assert_eq!(counted(h.peek(&name, "a", 1).await), 3 + held, "{name}");
    assert_eq!(h.limiter.return_leases().await.expect("give back"), held);
    assert_eq!(counted(h.peek(&name, "a", 1).await), 3, "{name}");
    for _ in 3..20 {
        assert_eq!(
            h.check(&name, "a", 1).await.outcome(),
            Outcome::Allowed,
            "{name}"
        );
    }
    let refused = h.check(&name, "a", 1).await;
    assert_eq!(
        refused.outcome(),
        Outcome::Limited {
            retry_after: Duration::from_secs(60)
        },
        "{name}"
    );
    assert_eq!(counted(h.peek(&name, "a", 1).await), 20, "{name}");
    h.advance(Duration::from_secs(60));
    for _ in 0..20 {
        assert_eq!(
            h.check(&name, "a", 1).await.outcome(),
            Outcome::Allowed,
            "{name}"
        );
    }
    assert_ne!(
        h.check(&name, "a", 1).await.outcome(),
        Outcome::Allowed,
        "{name}"
    );
}

/// Entries that need less than all or nothing (`tollgate::Need`, Envoy's quota mode): the
/// request's any-of group refuses it only when every member refuses; when it passes, the
/// members that admit are charged and those that refuse are not; a refusal of an entry that
/// must admit charges nothing, the group included; an optional entry never refuses. Each
/// entry on its own key (different slots on a cluster), every algorithm.
pub async fn any_of_group_refuses_only_when_all_refuse<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let minute = Duration::from_secs(60);
    let mut limits = Vec::new();
    for a in Algorithm::ALL {
        limits.push(limit_for("must", a, 5, minute));
        limits.push(limit_for("one", a, 1, minute));
        limits.push(limit_for("two", a, 2, minute));
        limits.push(limit_for("opt", a, 1, minute));
    }
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let (must, one, two, opt) = (
            name("must", a),
            name("one", a),
            name("two", a),
            name("opt", a),
        );
        let (u1, u2, u3, u4) = (
            [("user", "ua")],
            [("user", "ub")],
            [("user", "uc")],
            [("user", "ud")],
        );
        let items: [tollgate::CostedLimit<'_, &str>; 4] = [
            (&must, &u1, 1),
            (&one, &u2, 1),
            (&two, &u3, 1),
            (&opt, &u4, 1),
        ];
        let check = || {
            let h = &h;
            let items = &items;
            async move {
                let mut request = h.limiter.prepare_keyed_costs(items).expect("valid");
                request.set_need(1, Need::OneOf);
                request.set_need(2, Need::OneOf);
                request.set_need(3, Need::Optional);
                let v = h.limiter.decide(&request, Op::Check).await;
                from_store(&v, "any-of check");
                let allowed: Vec<bool> = v
                    .decisions()
                    .iter()
                    .map(|d| d.decision.is_allowed())
                    .collect();
                (v.outcome() == Outcome::Allowed, allowed)
            }
        };
        let remaining = |limit: &str, user: &'static str| {
            let h = &h;
            let limit = limit.to_owned();
            async move { h.peek(&limit, user, 1).await.decision().remaining }
        };
        let state = || async {
            [
                remaining(&must, "ua").await,
                remaining(&one, "ub").await,
                remaining(&two, "uc").await,
                remaining(&opt, "ud").await,
            ]
        };
        // Every entry admits: every one charged.
        assert_eq!(check().await, (true, vec![true; 4]), "{a:?}: first");
        assert_eq!(state().await, [4, 0, 1, 0], "{a:?}: after the first");
        // `one` and `opt` refuse, `two` admits: admitted, the refusals uncharged.
        assert_eq!(
            check().await,
            (true, vec![true, false, true, false]),
            "{a:?}: second"
        );
        assert_eq!(state().await, [3, 0, 0, 0], "{a:?}: after the second");
        // The whole group refuses: refused, and nothing charged (`must` included).
        assert_eq!(
            check().await,
            (false, vec![true, false, false, false]),
            "{a:?}: third"
        );
        assert_eq!(
            state().await,
            [3, 0, 0, 0],
            "{a:?}: a refused request charged"
        );
        // A refusal of an entry that must admit refuses whatever the group says.
        let fresh = [("user", "ue")];
        let exhausted: [tollgate::CostedLimit<'_, &str>; 2] = [(&one, &u2, 1), (&two, &fresh, 1)];
        let mut request = h.limiter.prepare_keyed_costs(&exhausted).expect("valid");
        request.set_need(1, Need::OneOf);
        let v = h.limiter.decide(&request, Op::Check).await;
        assert!(
            v.outcome() != Outcome::Allowed,
            "{a:?}: a must entry refused"
        );
        assert_eq!(
            remaining(&two, "ue").await,
            2,
            "{a:?}: group charged by a refusal"
        );
    }
}

/// A request that counts refusals (`Request::count_refusals`, envoyproxy/ratelimit's
/// counting, fixed windows only) charges every entry its cost, admitted or not, each on its
/// own, and decides each from its count after; by default a refused request charges nothing.
/// Limits of other algorithms refuse to count.
pub async fn counted_refusals_charge_every_entry<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let minute = Duration::from_secs(60);
    let limits = vec![
        limit_for("count-small", Algorithm::FixedWindow, 2, minute),
        limit_for("count-large", Algorithm::FixedWindow, 5, minute),
        limit_for("count-gcra", Algorithm::Gcra, 5, minute),
    ];
    let h = Harness::new(clock, fixture, limits);
    let (small, large) = ("count-small-fw", "count-large-fw");
    let check = |counting: bool, user: &'static str| {
        let h = &h;
        async move {
            let (ka, kb) = ([("user", user)], [("user", "other")]);
            let items: [tollgate::CostedLimit<'_, &str>; 2] = [(small, &ka, 1), (large, &kb, 1)];
            let mut request = h.limiter.prepare_keyed_costs(&items).expect("valid");
            if counting {
                request.count_refusals().expect("fixed windows count");
            }
            let v = h.limiter.decide(&request, Op::Check).await;
            from_store(&v, "counting check");
            let d: Vec<(bool, u64)> = v
                .decisions()
                .iter()
                .map(|d| (d.decision.is_allowed(), d.decision.remaining))
                .collect();
            (v.outcome() == Outcome::Allowed, d)
        }
    };
    // Counted: the third request is over `small` (count 3 > 2), and `large` is charged too.
    assert_eq!(check(true, "a").await, (true, vec![(true, 1), (true, 4)]));
    assert_eq!(check(true, "a").await, (true, vec![(true, 0), (true, 3)]));
    assert_eq!(check(true, "a").await, (false, vec![(false, 0), (true, 2)]));
    assert_eq!(check(true, "a").await, (false, vec![(false, 0), (true, 1)]));
    assert_eq!(h.peek(large, "other", 1).await.decision().remaining, 1);
    // The count goes past the limit: each refusal pushes it further.
    let v = h.peek(small, "a", 1).await;
    assert!(!v.decision().is_allowed());
    assert_eq!(v.decision().retry_after(), Some(minute), "the window's end");
    // Not counted (the default): the refused request charges nothing.
    h.limiter
        .reset(
            &h.limiter
                .prepare(&[large], &[("user", "other")], 1)
                .expect("valid"),
        )
        .await
        .expect("reset");
    assert_eq!(check(false, "b").await, (true, vec![(true, 1), (true, 4)]));
    assert_eq!(check(false, "b").await, (true, vec![(true, 0), (true, 3)]));
    assert_eq!(
        check(false, "b").await,
        (false, vec![(false, 0), (true, 3)])
    );
    assert_eq!(h.peek(large, "other", 1).await.decision().remaining, 3);
    // A lone counted entry, and a window that ends: the count starts again.
    let lone = |user: &'static str| {
        let h = &h;
        async move {
            let mut request = h
                .limiter
                .prepare(&[small], &[("user", user)], 1)
                .expect("valid");
            request.count_refusals().expect("fixed window");
            *h.limiter.decide(&request, Op::Check).await.decision()
        }
    };
    assert!(lone("c").await.is_allowed());
    assert!(lone("c").await.is_allowed());
    let over = lone("c").await;
    assert!(!over.is_allowed() && over.remaining == 0);
    h.advance(minute);
    assert!(lone("c").await.is_allowed(), "a new window");
    // Other algorithms do not count refusals.
    let mut request = h
        .limiter
        .prepare(&["count-gcra-gcra"], &[("user", "a")], 1)
        .expect("valid");
    let err = request.count_refusals().expect_err("gcra");
    assert!(
        matches!(err, CheckError::RefusalsNotCountable { .. }),
        "{err}"
    );
}
