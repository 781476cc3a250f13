//! The numbers a decision carries: remaining, reset after and retry after, exact.

use std::time::Duration;

use tollgate::{Algorithm, FakeClock, Outcome, Store};

use super::harness::{Harness, five_per_minute, name};
use crate::Fixture;

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
        let d = h.peek(&n, "u", 1).await.decision();
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
