//! Store call latencies of the last minute, for the status page's percentiles.
//!
//! `tollgate_store_latency_seconds` (Prometheus) counts since the process started, and its
//! percentiles are Prometheus's to compute over a range. The page shows a live figure with no
//! Prometheus behind it, so the service keeps its own: a fixed histogram per 10-second slot,
//! six slots in a ring (the last 50 to 60 s), log-spaced buckets 2^(1/4) apart (a percentile
//! is reported as its bucket's upper bound: at most 19 % high). Memory is fixed (6 × 84
//! counters) whatever the traffic, and recording is lock-free: one relaxed add, plus a swap
//! when a slot is reused. A record racing a slot's reuse may land in the wrong slot or be
//! lost: it is a figure for people, not a quota.
//!
//! Time is given by the caller (seconds from any origin), never read here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Slots in the ring.
const SLOTS: usize = 6;
/// Seconds per slot.
const SLOT_SECONDS: u64 = 10;
/// Buckets per slot: 1 µs × 2^(i/4), the last one open-ended (above ~1.2 s).
const BUCKETS: usize = 84;

/// Recent store call latencies.
#[derive(Debug)]
pub struct LatencyWindow {
    slots: [Slot; SLOTS],
}

#[derive(Debug)]
struct Slot {
    /// Which 10-second period (seconds ÷ 10, plus one: 0 is "never used") the counts are of.
    period: AtomicU64,
    counts: [AtomicU64; BUCKETS],
}

/// Percentiles of the recent latencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    /// Calls counted.
    pub samples: u64,
    /// Median, upper bound of its bucket.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// The slowest call's bucket.
    pub max: Duration,
}

impl Default for LatencyWindow {
    fn default() -> LatencyWindow {
        LatencyWindow {
            slots: std::array::from_fn(|_| Slot {
                period: AtomicU64::new(0),
                counts: std::array::from_fn(|_| AtomicU64::new(0)),
            }),
        }
    }
}

/// The bucket of `seconds`: the smallest `i` with `seconds ≤ 1 µs × 2^(i/4)`.
fn bucket(seconds: f64) -> usize {
    let micros = seconds * 1e6;
    if micros.is_nan() || micros <= 1.0 {
        return 0;
    }
    let i = (micros.log2() * 4.0).ceil();
    // Finite and positive here; saturates into the last bucket.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let i = i as usize;
    i.min(BUCKETS - 1)
}

/// The upper bound of bucket `i`.
fn upper_bound(i: usize) -> Duration {
    // i < 84: exact enough as f64.
    #[allow(clippy::cast_precision_loss)]
    let micros = (i as f64 / 4.0).exp2();
    Duration::from_secs_f64(micros / 1e6)
}

impl LatencyWindow {
    /// Records one call of `seconds`, made at `now_s` (seconds from the caller's origin).
    pub fn record(&self, seconds: f64, now_s: u64) {
        let period = now_s / SLOT_SECONDS + 1;
        let slot = &self.slots[(period % SLOTS as u64) as usize];
        let seen = slot.period.load(Ordering::Relaxed);
        if seen != period
            && slot
                .period
                .compare_exchange(seen, period, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            for c in &slot.counts {
                c.store(0, Ordering::Relaxed);
            }
        }
        slot.counts[bucket(seconds)].fetch_add(1, Ordering::Relaxed);
    }

    /// The percentiles of the calls of the last `SLOTS` periods as of `now_s` (`None`: no
    /// call in that time).
    pub fn percentiles(&self, now_s: u64) -> Option<Percentiles> {
        let period = now_s / SLOT_SECONDS + 1;
        let mut counts = [0u64; BUCKETS];
        for slot in &self.slots {
            let p = slot.period.load(Ordering::Relaxed);
            if p == 0 || p > period || p + SLOTS as u64 <= period {
                continue;
            }
            for (sum, c) in counts.iter_mut().zip(&slot.counts) {
                *sum += c.load(Ordering::Relaxed);
            }
        }
        let samples: u64 = counts.iter().sum();
        if samples == 0 {
            return None;
        }
        let at = |q: f64| {
            // The rank of the q-quantile, 1-based: ⌈q·n⌉, at least 1.
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss
            )]
            let rank = ((q * samples as f64).ceil() as u64).max(1);
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return upper_bound(i);
                }
            }
            upper_bound(BUCKETS - 1)
        };
        Some(Percentiles {
            samples,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: at(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percentiles land on the bucket holding the rank, never below the true value and at
    /// most 2^(1/4) above it.
    #[test]
    fn percentiles_bound_the_truth() {
        let w = LatencyWindow::default();
        // 1..=1000 µs.
        for us in 1..=1000u32 {
            w.record(f64::from(us) / 1e6, 5);
        }
        let p = w.percentiles(5).expect("samples");
        assert_eq!(p.samples, 1000);
        for (got, truth) in [
            (p.p50, 500e-6),
            (p.p90, 900e-6),
            (p.p99, 990e-6),
            (p.max, 1e-3),
        ] {
            let got = got.as_secs_f64();
            assert!(
                got >= truth * 0.999 && got <= truth * 1.19 * 1.001,
                "{got} for {truth}: {p:?}"
            );
        }
    }

    /// Slots older than the window are left out, and a reused slot starts from zero.
    #[test]
    fn forgets_what_is_older_than_a_minute() {
        let w = LatencyWindow::default();
        w.record(0.002, 0);
        w.record(0.000_1, 55);
        let p = w.percentiles(55).expect("samples");
        assert_eq!(p.samples, 2, "both within the last six slots: {p:?}");
        let p = w.percentiles(60).expect("samples");
        assert_eq!(p.samples, 1, "the slot of t=0 is out: {p:?}");
        // t=61 reuses the slot of t=0: its old count is gone.
        w.record(0.000_1, 61);
        assert_eq!(w.percentiles(61).map(|p| p.samples), Some(2));
        assert_eq!(w.percentiles(200), None);
        w.record(0.1, 60);
        let p = w.percentiles(61).expect("samples");
        assert_eq!(p.samples, 3);
        assert!(p.max >= Duration::from_millis(100), "{p:?}");
    }

    /// Extreme values stay in range.
    #[test]
    fn extremes() {
        assert_eq!(bucket(0.0), 0);
        assert_eq!(bucket(f64::NAN), 0);
        assert_eq!(bucket(100.0), BUCKETS - 1);
        assert!(upper_bound(BUCKETS - 2) >= Duration::from_secs(1));
    }
}
