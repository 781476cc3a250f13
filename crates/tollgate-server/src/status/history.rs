//! The last hour, for the status page: decisions, refusals and store errors per interval, per
//! limit and in all, the store's p99 latency and health per interval, and its outages ("down
//! since …", "recovered at …").
//!
//! An operator opening the page during or after an incident asks "since when?" and "is it
//! over?": the counters and the last minute's latency cannot say. So a task samples every
//! `server.history_interval` (10 s by default: 360 points an hour) and keeps the last hour in
//! a ring. Bounded whatever the config: per-limit series for the first `MAX_LIMITS` limits
//! that decide anything (an imported Envoy directory may hold thousands), totals for all.
//! Counts are stored as each interval's increase, so a reload or a new limit starts at zero
//! without a spike.
//!
//! The outage record follows every probe of the store (the sampler probes too, so an outage is
//! seen without anyone looking): when it failed first, and the last outage's start, end and
//! kind of failure.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;

/// Per-limit series kept, at most.
pub(crate) const MAX_LIMITS: usize = 64;
/// How much history is kept.
const SPAN: Duration = Duration::from_secs(3600);

/// One interval, all limits together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// When the interval ended, ms since the epoch.
    pub at_ms: u64,
    /// Decisions in the interval.
    pub decisions: u64,
    /// Refusals (by quota or by policy) in the interval.
    pub refused: u64,
    /// Decisions made by a failure policy in the interval (store errors).
    pub store_errors: u64,
    /// Whether the store answered its probe at the end of the interval.
    pub up: bool,
    /// The store's p99 latency over the last minute, ms (`None` without a call).
    pub p99_ms: Option<f64>,
}

/// One limit's series, aligned with the points (0 before it was first seen).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LimitSeries {
    /// Decisions per interval.
    pub decisions: Vec<u64>,
    /// Refusals per interval.
    pub refused: Vec<u64>,
    /// Policy decisions (store errors) per interval.
    pub store_errors: Vec<u64>,
}

/// The last hour, as `/v1/status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HistoryBody {
    /// The sampling interval, s.
    pub interval_s: f64,
    /// The intervals, oldest first.
    pub points: Vec<Point>,
    /// Per limit (at most `MAX_LIMITS` of them).
    pub limits: HashMap<String, LimitSeries>,
}

/// An outage of the store: from its first failed probe to its first answered one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outage {
    /// The first failed probe, ms since the epoch.
    pub from_ms: u64,
    /// The first answered probe after it (`None`: still down).
    pub to_ms: Option<u64>,
    /// The failure's kind, as the first failed probe saw it.
    pub error: String,
}

/// Cumulative counts of one limit: decisions, refusals, policy decisions.
pub(crate) type Totals = [u64; 3];

#[derive(Debug)]
pub(crate) struct History {
    interval: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    points: VecDeque<Point>,
    limits: HashMap<String, VecDeque<[u64; 3]>>,
    /// The cumulative counts at the last sample, for the increases.
    last: HashMap<String, Totals>,
    /// The current outage, or the last one.
    outage: Option<Outage>,
}

impl History {
    pub(crate) fn new(interval: Duration) -> History {
        History {
            interval: interval.max(Duration::from_millis(10)),
            inner: Mutex::new(Inner::default()),
        }
    }

    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    fn capacity(&self) -> usize {
        usize::try_from(SPAN.as_millis() / self.interval.as_millis().max(1))
            .unwrap_or(usize::MAX)
            .clamp(1, 36_000)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records one interval ending `at`: each limit's cumulative counts, the store's health
    /// and p99.
    pub(crate) fn sample(
        &self,
        at: SystemTime,
        totals: &[(&str, Totals)],
        up: bool,
        p99_ms: Option<f64>,
    ) {
        let capacity = self.capacity();
        let mut inner = self.lock();
        let mut point = Point {
            at_ms: epoch_ms(at),
            decisions: 0,
            refused: 0,
            store_errors: 0,
            up,
            p99_ms,
        };
        let held = inner.points.len();
        for &(name, now) in totals {
            let before = inner.last.get(name).copied().unwrap_or([0; 3]);
            // A count lower than before: the limit was replaced by a reload; count afresh.
            let delta: [u64; 3] = std::array::from_fn(|i| {
                if now[i] >= before[i] {
                    now[i] - before[i]
                } else {
                    now[i]
                }
            });
            point.decisions += delta[0];
            point.refused += delta[1];
            point.store_errors += delta[2];
            let tracked = inner.limits.contains_key(name);
            if !tracked && (delta == [0; 3] || inner.limits.len() >= MAX_LIMITS) {
                continue;
            }
            let series = inner.limits.entry(name.to_owned()).or_insert_with(|| {
                // Aligned with the points already held: zeros before it was seen.
                std::iter::repeat_n([0; 3], held).collect()
            });
            series.push_back(delta);
        }
        // The baseline of the next increases: this sample's counts, for every configured
        // limit (one entry each, like the config itself; limits a reload removed drop out).
        inner.last = totals
            .iter()
            .map(|&(name, now)| (name.to_owned(), now))
            .collect();
        // Limits not sampled this time (removed by a reload) still get their zero, so every
        // series stays aligned with the points.
        let target = held + 1;
        for series in inner.limits.values_mut() {
            while series.len() < target {
                series.push_back([0; 3]);
            }
        }
        inner.points.push_back(point);
        while inner.points.len() > capacity {
            inner.points.pop_front();
            for series in inner.limits.values_mut() {
                series.pop_front();
            }
        }
        inner
            .limits
            .retain(|_, series| series.iter().any(|d| *d != [0; 3]));
    }

    /// Records a probe of the store at `at`: `error` its failure's kind, `None` when it
    /// answered. Opens an outage at the first failure, closes it at the first answer.
    pub(crate) fn probed(&self, at: SystemTime, error: Option<&str>) {
        let mut inner = self.lock();
        let ongoing = inner.outage.as_ref().is_some_and(|o| o.to_ms.is_none());
        match (error, ongoing) {
            (Some(kind), false) => {
                inner.outage = Some(Outage {
                    from_ms: epoch_ms(at),
                    to_ms: None,
                    error: kind.to_owned(),
                });
                tracing::warn!(error = kind, "the store is down");
            }
            (None, true) => {
                if let Some(outage) = inner.outage.as_mut() {
                    outage.to_ms = Some(epoch_ms(at));
                    tracing::info!(
                        down_for_ms = outage.to_ms.unwrap_or(0).saturating_sub(outage.from_ms),
                        "the store answers again"
                    );
                }
            }
            _ => {}
        }
    }

    /// The current outage, or the last one (`None`: no outage since the start).
    pub(crate) fn outage(&self) -> Option<Outage> {
        self.lock().outage.clone()
    }

    /// The last hour, oldest first.
    pub(crate) fn body(&self) -> HistoryBody {
        let inner = self.lock();
        HistoryBody {
            interval_s: self.interval.as_secs_f64(),
            points: inner.points.iter().copied().collect(),
            limits: inner
                .limits
                .iter()
                .map(|(name, series)| {
                    let pick = |i: usize| series.iter().map(|d| d[i]).collect();
                    (
                        name.clone(),
                        LimitSeries {
                            decisions: pick(0),
                            refused: pick(1),
                            store_errors: pick(2),
                        },
                    )
                })
                .collect(),
        }
    }
}

fn epoch_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    /// Increases per interval, per limit and in all; an hour at most; series aligned.
    #[test]
    fn keeps_an_hour_of_increases() {
        let h = History::new(Duration::from_secs(60));
        h.sample(
            at(0),
            &[("a", [10, 2, 0]), ("b", [0, 0, 0])],
            true,
            Some(0.3),
        );
        h.sample(at(60), &[("a", [15, 2, 1]), ("b", [4, 4, 0])], false, None);
        let body = h.body();
        assert_eq!(body.points.len(), 2);
        assert_eq!(
            (
                body.points[1].decisions,
                body.points[1].refused,
                body.points[1].store_errors
            ),
            (9, 4, 1)
        );
        assert_eq!(body.limits["a"].decisions, [10, 5]);
        assert_eq!(body.limits["b"].refused, [0, 4], "zero before it was seen");
        for i in 2..100 {
            h.sample(at(60 * i), &[("a", [15 + i, 2, 1])], true, None);
        }
        let body = h.body();
        assert_eq!(body.points.len(), 60, "an hour of one-minute points");
        assert!(body.limits.values().all(|s| s.decisions.len() == 60));
        assert!(!body.limits.contains_key("b"), "b saw nothing in the hour");
    }

    /// A limit whose counts went down (replaced by a reload) counts afresh, no negative.
    #[test]
    fn a_reload_is_not_a_spike() {
        let h = History::new(Duration::from_secs(10));
        h.sample(at(0), &[("a", [100, 0, 0])], true, None);
        h.sample(at(10), &[("a", [3, 0, 0])], true, None);
        assert_eq!(h.body().limits["a"].decisions, [100, 3]);
    }

    /// Memory stays bounded however many limits decide.
    #[test]
    fn per_limit_series_are_capped() {
        let h = History::new(Duration::from_secs(10));
        let names: Vec<String> = (0..1000).map(|i| format!("l{i}")).collect();
        let totals: Vec<(&str, Totals)> = names.iter().map(|n| (n.as_str(), [1, 0, 0])).collect();
        h.sample(at(0), &totals, true, None);
        let body = h.body();
        assert_eq!(body.limits.len(), MAX_LIMITS);
        assert_eq!(body.points[0].decisions, 1000, "totals count every limit");
        // The next interval counts increases for every limit, tracked or not.
        let totals: Vec<(&str, Totals)> = names.iter().map(|n| (n.as_str(), [2, 0, 0])).collect();
        h.sample(at(10), &totals, true, None);
        assert_eq!(h.body().points[1].decisions, 1000, "one more each, not two");
    }

    /// An outage opens at the first failure and closes at the first answer.
    #[test]
    fn outages_open_and_close() {
        let h = History::new(Duration::from_secs(10));
        h.probed(at(0), None);
        assert_eq!(h.outage(), None);
        h.probed(at(5), Some("connection"));
        h.probed(at(6), Some("circuit_open"));
        let o = h.outage().expect("down");
        assert_eq!((o.to_ms, o.error.as_str()), (None, "connection"));
        h.probed(at(20), None);
        let o = h.outage().expect("the last outage");
        assert_eq!(o.to_ms.map(|t| t - o.from_ms), Some(15_000));
    }
}
