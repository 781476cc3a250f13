//! Each algorithm's own bound: a fixed window's edge, a sliding log's exactness, a sliding
//! window's one-bucket error, checked over random arrivals.

use std::time::Duration;

use tollgate::{Algorithm, FakeClock, Limit, Outcome, Quota, Store};

use super::START;
use super::harness::{Harness, five_per_minute, from_store, limit_for, name};
use crate::Fixture;

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

/// A sliding window whose bucket width changes (a reload with another `buckets` or `period`)
/// starts afresh on its own key, and the old width's state, read back, is still right. Read
/// under a wider width, the old bucket numbers would be centuries in the future: every check
/// refused with a retry of centuries, and the key's expiry as long.
pub async fn sliding_window_with_another_width_starts_afresh<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let mut reloads = Reloads::new(clock, fixture);
    let window = |buckets: u32, period: u64| {
        Limit::new(
            "rewidth",
            Algorithm::SlidingWindow { buckets },
            Quota::new(10, Duration::from_secs(period)).expect("valid quota"),
        )
        .expect("valid limit")
        .keyed_by(["user"])
        .expect("valid part")
    };
    let old = reloads.harness(window(60, 60));
    spend(&old, 10).await;
    // Wider buckets (6 s, 2 s) and narrower ones (0.5 s), each one after the other.
    for (buckets, period) in [(10, 60), (60, 120), (120, 60)] {
        let new = reloads.harness(window(buckets, period));
        let v = new.check("rewidth", "u", 1).await;
        from_store(&v, "the new width");
        let d = v.decision();
        assert!(
            v.outcome() == Outcome::Allowed && d.remaining == 9,
            "{buckets} buckets over {period} s: {d:?}"
        );
        assert!(
            d.reset_after <= Duration::from_secs(period + 6),
            "{buckets} buckets over {period} s: reset after {:?}",
            d.reset_after
        );
    }
    let v = old.check("rewidth", "u", 1).await;
    from_store(&v, "the old width again");
    assert!(
        matches!(v.outcome(), Outcome::Limited { retry_after } if retry_after <= Duration::from_secs(61)),
        "{v:?}"
    );
}

/// A GCRA limit whose rate changes (a reload with another `limit` or `period`) starts afresh
/// on its own key, and the old rate's state, read back, is still right. Kept under the new
/// rate, the old debt (an instant a day ahead) refused a limit reloaded from 10 a day to 10 a
/// second for up to a day, and its key lived as long.
pub async fn gcra_with_another_rate_starts_afresh<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let mut reloads = Reloads::new(clock, fixture);
    let gcra = |limit: u64, period: u64| {
        Limit::new(
            "rewidth",
            Algorithm::Gcra,
            Quota::new(limit, Duration::from_secs(period)).expect("valid quota"),
        )
        .expect("valid limit")
        .keyed_by(["user"])
        .expect("valid part")
    };
    let old = reloads.harness(gcra(10, 86_400));
    spend(&old, 10).await;
    for (limit, period) in [(10, 1), (5, 86_400)] {
        let new = reloads.harness(gcra(limit, period));
        let v = new.check("rewidth", "u", 1).await;
        from_store(&v, "the new rate");
        let d = v.decision();
        assert!(
            v.outcome() == Outcome::Allowed && d.remaining == limit - 1,
            "{limit} per {period} s: {d:?}"
        );
        assert!(
            d.reset_after <= Duration::from_secs(period),
            "{limit} per {period} s: reset after {:?}",
            d.reset_after
        );
    }
    let v = old.check("rewidth", "u", 1).await;
    from_store(&v, "the old rate again");
    assert!(
        matches!(v.outcome(), Outcome::Limited { retry_after } if retry_after <= Duration::from_secs(8_640)),
        "{v:?}"
    );
}

/// Limiters of one limit each over the fixture's one store and namespace, as reloads make
/// them: the first keeps the fixture's guard (its servers) alive.
pub(super) struct Reloads<S> {
    store: std::sync::Arc<S>,
    namespace: tollgate::Namespace,
    clock: FakeClock,
    guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl<S: Store> Reloads<S> {
    pub(super) fn new(clock: FakeClock, fixture: Fixture<S>) -> Reloads<S> {
        Reloads {
            store: std::sync::Arc::new(fixture.store),
            namespace: fixture.namespace,
            clock,
            guard: Some(fixture.guard),
        }
    }

    pub(super) fn harness(&mut self, limit: Limit) -> Harness<std::sync::Arc<S>> {
        let fixture = Fixture {
            store: std::sync::Arc::clone(&self.store),
            namespace: self.namespace.clone(),
            guard: self.guard.take().unwrap_or_else(|| Box::new(())),
        };
        Harness::new(self.clock.clone(), fixture, vec![limit])
    }
}

async fn spend<S: Store>(h: &Harness<S>, units: u64) {
    for i in 0..units {
        let v = h.check("rewidth", "u", 1).await;
        from_store(&v, "spending");
        assert_eq!(v.outcome(), Outcome::Allowed, "unit {i}: {v:?}");
    }
}
