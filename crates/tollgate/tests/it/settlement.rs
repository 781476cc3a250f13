//! Settlements (`Rule::adjust`) under any sequence of checks, charges, refunds and time: a
//! key never shows more than its capacity, and the units checks admit over any window stay
//! within what the algorithm allows there plus what was refunded in it — so a refund gives
//! back at most what it names, and a refund of units that already replenished creates
//! nothing.

use proptest::prelude::*;
use tollgate::Quota;
use tollgate::rules::{FixedWindow, Gcra, Rule, SlidingLog, TokenBucket};
use tollgate::{Status, Timestamp};

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

    /// Settlements owe at most one capacity beyond empty and the hour of room for queued
    /// reservations (`rules::DEBT_HORIZON_US`), whatever the sequence: GCRA and the token
    /// bucket are full again within `2 × burst × T + ⌈1 h / T⌉ × T` (and answer alike after
    /// every step, settlements included), the sliding log never holds more than `2 × limit`
    /// live entries.
    #[test]
    fn settlement_debt_stays_within_one_capacity(steps in steps()) {
        let quota = Quota::new(5, std::time::Duration::from_secs(10)).expect("valid");
        let (gcra, bucket, log) =
            (Gcra::new(&quota), TokenBucket::new(&quota), SlidingLog::new(&quota));
        let t = quota.emission_interval_micros();
        let cap = 2 * 5 * t + tollgate::rules::DEBT_HORIZON_US.div_ceil(t) * t;
        let period = quota.period_micros();
        let mut states: (
            <Gcra as Rule>::State,
            <TokenBucket as Rule>::State,
            <SlidingLog as Rule>::State,
        ) = Default::default();
        let mut now = 1_000_000_000_000u64;
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Check(cost) => {
                    let at = Timestamp::from_micros(now);
                    states.0 = gcra.check(states.0.clone(), at, cost).1;
                    states.1 = bucket.check(states.1.clone(), at, cost).1;
                    states.2 = log.check(states.2.clone(), at, cost).1;
                }
                Step::Adjust(delta) => {
                    gcra.adjust(&mut states.0, now, delta);
                    bucket.adjust(&mut states.1, now, delta);
                    log.adjust(&mut states.2, now, delta);
                }
                Step::Advance(us) => now += us,
            }
            let (g, b): (Status, Status) = (gcra.status(&states.0, now), bucket.status(&states.1, now));
            prop_assert_eq!(g, b, "step {}: GCRA and the token bucket differ", i);
            prop_assert!(g.reset_after_us <= cap, "step {}: {:?}", i, g);
            let live = states.2.entries.iter().filter(|&&t| t + period > now).count();
            prop_assert!(live <= 10, "step {}: {} live entries", i, live);
        }
    }
}

/// A settlement on a queue of reservations is counted on top of it, and a queue deeper than
/// the horizon is never moved back: 40 reservations of 6 per minute (T = 10 s, burst 6) run
/// 340 s past the burst, and a charge of 6 puts the next reservation six slots later (410 s);
/// 400 reservations run 3,940 s, past the hour and a capacity, and a charge then adds nothing
/// and takes nothing away (the 401st waits 3,950 s). GCRA and the token bucket agree.
#[test]
fn settlements_count_on_a_queue_and_keep_a_deeper_one() {
    use tollgate::rules::Schedule;
    fn next_wait<R: Schedule>(rule: &R, queued: usize) -> u64 {
        let now = 1_000_000_000_000u64;
        let mut state = R::State::default();
        for _ in 0..queued {
            rule.reserve(&mut state, now, 1, u64::MAX).expect("a slot");
        }
        rule.adjust(&mut state, now, 6);
        rule.reserve(&mut state, now, 1, u64::MAX)
            .expect("a slot")
            .0
    }
    let quota = Quota::new(6, std::time::Duration::from_secs(60)).expect("valid");
    for (queued, wait) in [(40, 410_000_000), (400, 3_950_000_000)] {
        assert_eq!(
            next_wait(&Gcra::new(&quota), queued),
            wait,
            "gcra, {queued} queued"
        );
        assert_eq!(
            next_wait(&TokenBucket::new(&quota), queued),
            wait,
            "token bucket, {queued} queued"
        );
    }
}
