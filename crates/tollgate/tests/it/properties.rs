//! Invariants of every algorithm over random arrival sequences, at microsecond precision.

use proptest::prelude::*;
use tollgate::rules::{AnyRule, AnyState};
use tollgate::{Algorithm, Op, Quota};

/// A random quota: limit 1–20, period 1 ms–10 s, burst 1–30.
fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=20, 1_000u64..=10_000_000, 1u64..=30).prop_map(|(limit, period_us, burst)| {
        Quota::new(limit, std::time::Duration::from_micros(period_us))
            .and_then(|q| q.with_burst(burst))
            .expect("valid by construction")
    })
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::FixedWindow),
        Just(Algorithm::SlidingLog),
        (1u32..=12).prop_map(|buckets| Algorithm::SlidingWindow { buckets }),
        Just(Algorithm::TokenBucket),
        Just(Algorithm::Gcra),
    ]
}

/// Arrivals as (gap as a fraction of the period in 1/1000ths, raw cost).
fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec(
        (prop_oneof![Just(0u64), 0u64..50, 0u64..1_500], 1u64..=40),
        1..120,
    )
}

fn capacity(algorithm: Algorithm, quota: &Quota) -> u64 {
    if algorithm.uses_burst() {
        quota.burst()
    } else {
        quota.limit()
    }
}

/// Replays arrivals; calls `each(rule, state_before, now, cost, admitted)` per call.
fn replay(
    algorithm: Algorithm,
    quota: &Quota,
    arrivals: &[(u64, u64)],
    mut each: impl FnMut(&AnyRule, &AnyState, u64, u64, Result<(), u64>),
) -> Vec<(u64, u64)> {
    let rule = AnyRule::new(algorithm, quota);
    let mut state = rule.empty_state();
    let mut now = 1_800_000_000_000_000u64;
    let cap = capacity(algorithm, quota);
    let mut admitted = Vec::new();
    for &(gap, raw_cost) in arrivals {
        now += quota.period_micros() * gap / 1_000;
        let cost = 1 + (raw_cost - 1) % cap;
        let before = state.clone();
        let result = rule.admits(&mut state, now, cost);
        if result.is_ok() {
            rule.charge(&mut state, now, cost);
            admitted.push((now, cost));
        }
        each(&rule, &before, now, cost, result);
    }
    admitted
}

fn in_window(history: &[(u64, u64)], t: u64, period: u64) -> u64 {
    history
        .iter()
        .filter(|&&(at, _)| at <= t && at + period > t)
        .map(|&(_, c)| c)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// `AnyRule::decide` (one dispatch, what the memory store runs) answers, charges and leaves
    /// the state exactly as `admits`, `charge` and `status` in three, peek or check.
    #[test]
    fn one_dispatch_decides_as_three(a in algorithm(), q in quota(), xs in arrivals(), peeks in proptest::collection::vec(any::<bool>(), 120)) {
        let mut i = 0;
        replay(a, &q, &xs, |rule, before, now, cost, result| {
            let op = if peeks[i % peeks.len()] { Op::Peek } else { Op::Check };
            i += 1;
            let mut three = before.clone();
            if result.is_ok() && op == Op::Check {
                rule.charge(&mut three, now, cost);
            }
            let expected = (rule.status(&mut three, now), result.err());
            let mut one = before.clone();
            assert_eq!(rule.decide(&mut one, now, cost, op), expected, "{a}");
            assert_eq!(one, three, "{a}: states differ");
        });
    }

    /// `retry_after` is exact to the microsecond: refused 1 µs before, admitted at it.
    #[test]
    fn retry_after_is_exact(a in algorithm(), q in quota(), xs in arrivals()) {
        replay(a, &q, &xs, |rule, before, now, cost, result| {
            if let Err(retry) = result {
                assert!(retry > 0, "{a}: denied with retry 0");
                let mut s = before.clone();
                assert!(rule.admits(&mut s, now + retry, cost).is_ok(), "{a}: refused at retry_after");
                assert!(rule.admits(&mut s, now + retry - 1, cost).is_err(), "{a}: admitted 1 µs early");
            }
        });
    }

    /// `remaining` unit requests pass right now, and not one more.
    #[test]
    fn remaining_is_exact(a in algorithm(), q in quota(), xs in arrivals()) {
        replay(a, &q, &xs, |rule, before, now, _, _| {
            let mut s = before.clone();
            let remaining = rule.status(&mut s, now).remaining;
            for i in 0..remaining {
                assert!(rule.admits(&mut s, now, 1).is_ok(), "{a}: unit {i} of {remaining} refused");
                rule.charge(&mut s, now, 1);
            }
            assert!(rule.admits(&mut s, now, 1).is_err(), "{a}: more than remaining={remaining} passed");
        });
    }

    /// After `reset_after` the key is back to a full quota, and not 1 µs earlier.
    #[test]
    fn reset_after_is_exact(a in algorithm(), q in quota(), xs in arrivals()) {
        let full = if a.uses_burst() { q.burst() } else { q.limit() };
        replay(a, &q, &xs, |rule, before, now, _, _| {
            let mut s = before.clone();
            let reset = rule.status(&mut s, now).reset_after_us;
            assert_eq!(rule.status(&mut s, now + reset).remaining, full, "{a}: not full at reset_after");
            if reset > 0 {
                assert!(rule.status(&mut s, now + reset - 1).reset_after_us > 0, "{a}: full before reset_after");
            }
        });
    }

    /// A refused call leaves the state exactly as it was.
    #[test]
    fn denial_changes_nothing(a in algorithm(), q in quota(), xs in arrivals()) {
        let rule = AnyRule::new(a, &q);
        let mut state = rule.empty_state();
        let mut now = 1_800_000_000_000_000u64;
        for &(gap, raw) in &xs {
            now += q.period_micros() * gap / 1_000;
            let cost = 1 + (raw - 1) % capacity(a, &q);
            let before = state.clone();
            match rule.admits(&mut state, now, cost) {
                Ok(()) => rule.charge(&mut state, now, cost),
                Err(_) => prop_assert_eq!(&state, &before),
            }
        }
    }

    /// The sliding log and the sliding window never hold more than `limit` in any interval
    /// of one period; the sliding log refuses only when the limit is really reached.
    #[test]
    fn sliding_algorithms_never_exceed_the_limit(q in quota(), xs in arrivals(), buckets in 1u32..=12) {
        let p = q.period_micros();
        for a in [Algorithm::SlidingLog, Algorithm::SlidingWindow { buckets }] {
            let mut history = Vec::new();
            replay(a, &q, &xs, |_, _, now, cost, result| {
                let exact = in_window(&history, now, p);
                match result {
                    Ok(()) => {
                        assert!(exact + cost <= q.limit(), "{a}: over the limit");
                        history.push((now, cost));
                    }
                    Err(_) if a == Algorithm::SlidingLog => {
                        assert!(exact + cost > q.limit(), "{a}: refused below the limit");
                    }
                    Err(_) => {}
                }
            });
        }
    }

    /// The fixed window holds at most `limit` per aligned window, at most 2 × limit in any
    /// period.
    #[test]
    fn fixed_window_bounds(q in quota(), xs in arrivals()) {
        let p = q.period_micros();
        let admitted = replay(Algorithm::FixedWindow, &q, &xs, |_, _, _, _, _| {});
        for &(t, _) in &admitted {
            let window = t - t % p;
            let same: u64 = admitted.iter().filter(|&&(at, _)| at - at % p == window).map(|&(_, c)| c).sum();
            prop_assert!(same <= q.limit());
            prop_assert!(in_window(&admitted, t, p) <= 2 * q.limit());
        }
    }

    /// GCRA and the token bucket give the same decision to every call.
    #[test]
    fn gcra_equals_token_bucket(q in quota(), xs in arrivals()) {
        let mut gcra = Vec::new();
        replay(Algorithm::Gcra, &q, &xs, |rule, before, now, _, result| {
            let mut s = before.clone();
            gcra.push((result, rule.status(&mut s, now)));
        });
        let mut i = 0;
        replay(Algorithm::TokenBucket, &q, &xs, |rule, before, now, _, result| {
            let mut s = before.clone();
            assert_eq!((result, rule.status(&mut s, now)), gcra[i], "call {i}");
            i += 1;
        });
    }
}
