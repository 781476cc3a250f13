//! Settlements (`Rule::adjust`) under any sequence of checks, charges, refunds and time: a
//! key never shows more than its capacity, and the units checks admit over any window stay
//! within what the algorithm allows there plus what was refunded in it — so a refund gives
//! back at most what it names, and a refund of units that already replenished creates
//! nothing.

use proptest::prelude::*;
use tollgate::Quota;
use tollgate::rules::{FixedWindow, Gcra, Rule, SlidingLog, TokenBucket};

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Step {
    Check(u64),
    Adjust(i64),
    Advance(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            4 => (1u64..=3).prop_map(Step::Check),
            2 => (-6i64..=6).prop_map(Step::Adjust),
            3 => (0u64..=4_000_000).prop_map(Step::Advance),
        ],
        1..120,
    )
}

/// What happened at an instant: units admitted by checks, units refunded.
struct Event {
    at: u64,
    admitted: u64,
    refunded: u64,
}

/// Runs `steps` on `rule` from a fresh state at t = 10^12 µs; asserts the capacity bound
/// after every step and returns the events.
fn run<R: Rule>(rule: &R, capacity: u64, steps: &[Step]) -> Vec<Event> {
    let mut state = R::State::default();
    let mut now = 1_000_000_000_000u64;
    let mut events = Vec::new();
    for step in steps {
        match *step {
            Step::Check(cost) => {
                let at = tollgate::Timestamp::from_micros(now);
                let (d, s) = rule.check(state.clone(), at, cost);
                state = s;
                if d.is_allowed() {
                    events.push(Event {
                        at: now,
                        admitted: cost,
                        refunded: 0,
                    });
                }
            }
            Step::Adjust(delta) => {
                rule.adjust(&mut state, now, delta);
                if delta < 0 {
                    events.push(Event {
                        at: now,
                        admitted: 0,
                        refunded: delta.unsigned_abs(),
                    });
                }
            }
            Step::Advance(us) => now += us,
        }
        let remaining = rule.status(&state, now).remaining;
        assert!(remaining <= capacity, "{remaining} remaining of {capacity}");
    }
    events
}

/// Over every window [a, a + len] starting at an event: admitted ≤ bound(len) + refunded.
fn within(events: &[Event], bound: impl Fn(u64, u64) -> u64) -> Result<(), TestCaseError> {
    for (i, first) in events.iter().enumerate() {
        let (mut admitted, mut refunded) = (0, 0);
        for e in &events[i..] {
            admitted += e.admitted;
            refunded += e.refunded;
            let allowed = bound(first.at, e.at) + refunded;
            prop_assert!(
                admitted <= allowed,
                "{admitted} admitted in [{}, {}] with {refunded} refunded, bound {allowed}",
                first.at,
                e.at
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// GCRA and the token bucket, 5 per 10 s (T = 2 s), burst 5: at most burst + ⌊len/T⌋
    /// over any window, plus refunds.
    #[test]
    fn smooth_algorithms_settle_within_their_bound(steps in steps()) {
        let quota = Quota::new(5, std::time::Duration::from_secs(10)).expect("valid");
        let t = quota.emission_interval_micros();
        let bound = |a: u64, b: u64| 5 + (b - a) / t;
        within(&run(&Gcra::new(&quota), 5, &steps), bound)?;
        within(&run(&TokenBucket::new(&quota), 5, &steps), bound)?;
    }

    /// The sliding log, 5 per 10 s: at most 5 in any window shorter than the period, plus
    /// refunds; the fixed window, 5 per calendar window of 10 s, plus refunds.
    #[test]
    fn window_algorithms_settle_within_their_bound(steps in steps()) {
        let quota = Quota::new(5, std::time::Duration::from_secs(10)).expect("valid");
        let period = quota.period_micros();
        within(&run(&SlidingLog::new(&quota), 5, &steps), |a, b| {
            if b - a < period { 5 } else { u64::MAX / 2 }
        })?;
        within(&run(&FixedWindow::new(&quota), 5, &steps), |a, b| {
            if a / period == b / period { 5 } else { u64::MAX / 2 }
        })?;
    }
}
