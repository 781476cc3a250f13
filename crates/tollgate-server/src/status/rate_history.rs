//! Decisions per second per limit for `GET /v1/status`, from the counts' history.
//!
//! The counts ([`super::observed`]) only grow; a rate is their difference over a span of
//! real time. Computing it here rather than in the page keeps it right whoever asks (a
//! browser whose timers are throttled or virtual, a script polling now and then): each call
//! is compared with the newest snapshot at least a second old, and a snapshot is kept at most
//! once a second, for a minute. Polled every second, the rate is over the last second or
//! two; polled rarely, over the time since the previous call (up to a minute; beyond, the
//! first call has no rate yet).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The shortest span a rate is computed over.
const MIN_SPAN: Duration = Duration::from_secs(1);
/// How long snapshots are kept.
const KEEP: Duration = Duration::from_secs(60);

/// `limit` → `[decisions, refusals]` since the process started.
pub(crate) type Counts = HashMap<String, [u64; 2]>;

/// Snapshots of the counts, oldest first.
#[derive(Debug, Default)]
pub(crate) struct RateHistory {
    snapshots: Mutex<VecDeque<(Instant, Counts)>>,
}

/// A limit's rates over the last `over_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rate {
    /// Decisions per second.
    pub decisions_per_s: f64,
    /// Refusals (by the quota or by policy) per second.
    pub denied_per_s: f64,
    /// The span, s.
    pub over_s: f64,
}

impl RateHistory {
    /// Each limit's rate as of `now` with the counts `current` (none for a limit without a
    /// snapshot at least a second old); keeps `current` as a snapshot when the newest is a
    /// second old or more.
    pub(crate) fn rates(&self, now: Instant, current: &Counts) -> HashMap<String, Rate> {
        let mut snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while snapshots
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > KEEP)
        {
            snapshots.pop_front();
        }
        let base = snapshots
            .iter()
            .rev()
            .find(|(at, _)| now.saturating_duration_since(*at) >= MIN_SPAN);
        let rates = match base {
            Some((at, old)) => {
                let span = now.saturating_duration_since(*at).as_secs_f64();
                current
                    .iter()
                    .filter_map(|(limit, [total, denied])| {
                        let [old_total, old_denied] = old.get(limit)?;
                        // Counts far below 2^53.
                        #[allow(clippy::cast_precision_loss)]
                        let per_s = |now: u64, then: u64| now.saturating_sub(then) as f64 / span;
                        Some((
                            limit.clone(),
                            Rate {
                                decisions_per_s: per_s(*total, *old_total),
                                denied_per_s: per_s(*denied, *old_denied),
                                over_s: span,
                            },
                        ))
                    })
                    .collect()
            }
            None => HashMap::new(),
        };
        if snapshots
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= MIN_SPAN)
        {
            snapshots.push_back((now, current.clone()));
        }
        rates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(total: u64, denied: u64) -> Counts {
        HashMap::from([("a".to_owned(), [total, denied])])
    }

    /// The rate is over the newest snapshot at least a second old; none before there is one.
    #[test]
    fn rates_over_at_least_a_second() {
        let h = RateHistory::default();
        let t0 = Instant::now();
        assert!(h.rates(t0, &counts(0, 0)).is_empty(), "no snapshot yet");
        assert!(
            h.rates(t0 + Duration::from_millis(500), &counts(10, 0))
                .is_empty(),
            "the only snapshot is under a second old"
        );
        let r = h.rates(t0 + Duration::from_secs(2), &counts(40, 10))["a"];
        assert_eq!(
            r,
            Rate {
                decisions_per_s: 20.0,
                denied_per_s: 5.0,
                over_s: 2.0
            }
        );
        // Snapshots at t0 and t0+2s now; at t0+2.5s the base is t0 (the newest ≥ 1 s old).
        let r = h.rates(t0 + Duration::from_millis(2500), &counts(50, 10))["a"];
        assert_eq!(r.over_s, 2.5);
        let r = h.rates(t0 + Duration::from_secs(3), &counts(60, 10))["a"];
        assert_eq!(
            (r.decisions_per_s, r.over_s),
            (20.0, 1.0),
            "base t0+2s: {r:?}"
        );
    }

    /// Snapshots older than a minute are dropped; a limit new since the base has no rate.
    #[test]
    fn old_snapshots_and_new_limits() {
        let h = RateHistory::default();
        let t0 = Instant::now();
        h.rates(t0, &counts(0, 0));
        assert!(
            h.rates(t0 + Duration::from_secs(61), &counts(5, 0))
                .is_empty()
        );
        let mut more = counts(10, 0);
        more.insert("b".to_owned(), [3, 0]);
        let rates = h.rates(t0 + Duration::from_secs(62), &more);
        assert_eq!(rates["a"].decisions_per_s, 5.0);
        assert!(!rates.contains_key("b"), "{rates:?}");
    }
}
