//! The page's section for `--candidates`: one limit at several values, each replayed on its
//! own, side by side — their admitted and refused over time, one colour per candidate, and
//! the keys each refused — so that the values are compared on the same traffic.

use super::html_text::Figure;
use super::html_text::escape;
use super::limit_html::level;
use super::{CandidateSet, Report};
use crate::chart::{self, Level, Series, TimeAxis};
use crate::limit_stats::LimitStats;

impl Report {
    /// The candidates of one limit side by side: their admitted and refused over time, and
    /// whom each refused.
    pub(super) fn candidates_html(&self, c: &CandidateSet, chart: &mut Figure<'_>) -> String {
        let limits: Vec<&LimitStats> = c
            .limits
            .iter()
            .filter_map(|&i| self.limits.get(i))
            .collect();
        let Some(first) = limits.first() else {
            return String::new();
        };
        let mut h = format!(
            "<h2>Candidates for {}: side by side</h2>\n<p>The same limit ({}, {}) at {} \
             values, each replayed on its own.</p>\n",
            escape(&c.of),
            first.algorithm,
            escape(&first.quota),
            limits.len()
        );
        h.push_str(&chart(
            format!("{}-candidates", c.of),
            self.candidates_over_time_chart(c, &limits),
        ));
        h.push_str(&chart(
            format!("{}-candidates-keys", c.of),
            self.candidates_keys_chart(c, &limits),
        ));
        h
    }

    /// Each candidate's admitted (solid) and refused (dashed) over time, in its colour,
    /// beside the requests (and each candidate's level, for a global limit).
    fn candidates_over_time_chart(&self, c: &CandidateSet, limits: &[&LimitStats]) -> String {
        let first = limits[0];
        let len = limits.iter().map(|l| l.per_second.len()).max().unwrap_or(0);
        let bin = chart::bin_seconds(len, Some(first.period.as_secs()));
        let requests: Vec<u32> = first.per_second.iter().map(|p| p[0]).collect();
        let mut names: Vec<String> = Vec::new();
        for l in limits {
            names.push(format!("{} admitted", l.quota));
            names.push(format!("{} refused", l.quota));
        }
        let mut series = vec![Series {
            color: Some(7),
            ..Series::new("requests", chart::rebin(&requests, bin))
        }];
        for (k, l) in limits.iter().enumerate() {
            let admitted: Vec<u32> = l.per_second.iter().map(|p| p[1]).collect();
            let color = if k >= 7 { k + 1 } else { k };
            series.push(Series {
                color: Some(color),
                ..Series::new(&names[2 * k], chart::rebin(&admitted, bin))
            });
            series.push(Series {
                color: Some(color),
                dashed: true,
                ..Series::new(
                    &names[2 * k + 1],
                    chart::rebin(&l.refused_per_second(), bin),
                )
            });
        }
        let levels: Vec<Level> = if first.keyed {
            Vec::new()
        } else {
            limits.iter().map(|l| level(l, bin)).collect()
        };
        chart::lines(
            &format!(
                "{}: admitted (solid) and refused (dashed) per candidate",
                c.of
            ),
            "requests",
            TimeAxis {
                start_us: first.start_us,
                bin_s: bin,
            },
            &series,
            &levels,
            &self.marks,
        )
    }

    /// The keys each candidate refused, abusers and collateral stacked.
    fn candidates_keys_chart(&self, c: &CandidateSet, limits: &[&LimitStats]) -> String {
        let cmax = self.collateral_max();
        let labels: Vec<String> = limits.iter().map(|l| l.quota.clone()).collect();
        let split: Vec<(u64, u64)> = limits.iter().map(|l| l.refused_split(cmax)).collect();
        let seen = limits[0].keys_seen.text();
        chart::stacked(
            &format!("{}: keys refused per candidate, of {seen} seen", c.of),
            "keys refused",
            &labels,
            &[
                (
                    &format!("abusers (refused > {cmax} times)"),
                    split.iter().map(|s| s.0).collect(),
                ),
                (
                    &format!("collateral (≤ {cmax} times)"),
                    split.iter().map(|s| s.1).collect(),
                ),
            ],
            None,
            true,
        )
    }
}
