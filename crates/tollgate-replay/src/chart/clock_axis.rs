//! [`ClockAxis`]: a time axis whose ticks fall on round clock times.
//!
//! plotters places an `f64` axis's ticks on round *numbers*: seconds from the first line, 50
//! by 50 on a three-minute log (09:00:50, 09:01:40…). A person reads a clock by its round
//! times (09:00:30, 09:01:00…), so the ticks are chosen here and the axis is otherwise
//! plotters' linear one.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;

/// Seconds from `start_us` over a span, linear, ticked on round clock times.
pub(super) struct ClockAxis {
    linear: RangedCoordf64,
    ticks: Vec<f64>,
}

impl ClockAxis {
    /// The axis of `span_s` seconds from `start_us` (µs since the epoch, UTC).
    pub(super) fn new(start_us: u64, span_s: f64) -> ClockAxis {
        ClockAxis {
            linear: (0.0..span_s).into(),
            ticks: clock_ticks(start_us, span_s),
        }
    }
}

impl Ranged for ClockAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.linear.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.linear.range()
    }
}

/// The ticks of a span of `span_s` seconds from `start_us`, in seconds from the start: on
/// the round clock times a person reads (every 1, 2, 5, 10, 15 or 30 s; 1, 2, 5, 10, 15 or
/// 30 min; 1, 2, 3, 6 or 12 h; days), the finest step that puts at most 8 on the span.
fn clock_ticks(start_us: u64, span_s: f64) -> Vec<f64> {
    const STEPS: [u64; 18] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200,
        86_400,
    ];
    let fits = |step: u64| span_s / step as f64 <= 8.0;
    let step = STEPS
        .into_iter()
        .find(|&step| fits(step))
        .unwrap_or_else(|| 86_400 * (span_s / 8.0 / 86_400.0).ceil() as u64);
    let start_s = start_us / 1_000_000;
    let lead_us = start_us % 1_000_000;
    // The first round time at or after the start, then every step to the span's end.
    let first = start_s.div_ceil(step) * step;
    let offset = |t: u64| (t - start_s) as f64 - lead_us as f64 / 1e6;
    (0..)
        .map(|i| first + i * step)
        .map(offset)
        .skip_while(|&x| x < 0.0)
        .take_while(|&x| x <= span_s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::clock_ticks;

    /// 2025-11-30 09:00:00 UTC, in µs.
    const NINE: u64 = 1_764_493_200_000_000;

    #[test]
    fn ticks_fall_on_round_clock_times() {
        // Three minutes from 09:00:00: every 30 s (15 s would make 12 ticks).
        assert_eq!(
            clock_ticks(NINE, 179.0),
            vec![0.0, 30.0, 60.0, 90.0, 120.0, 150.0]
        );
        // From 09:00:07.5: the first tick is 09:00:30, 22.5 s in.
        let ticks = clock_ticks(NINE + 7_500_000, 179.0);
        assert_eq!(ticks.first(), Some(&22.5));
        assert!(ticks.windows(2).all(|w| w[1] - w[0] == 30.0), "{ticks:?}");
        // An hour: every 10 min; a day: every 3 h.
        assert_eq!(clock_ticks(NINE, 3_600.0).len(), 7);
        assert_eq!(clock_ticks(NINE, 3_600.0)[1], 600.0);
        assert_eq!(clock_ticks(NINE, 86_400.0)[1], 10_800.0);
        // A week: whole days.
        assert_eq!(
            clock_ticks(NINE, 7.0 * 86_400.0)[1] - clock_ticks(NINE, 7.0 * 86_400.0)[0],
            86_400.0
        );
    }
}
