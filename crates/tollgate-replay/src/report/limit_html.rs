//! One limit's section of the page: its figures, its requests, admitted and refused over
//! time, and when it refused: its most refused keys, those keys over time, and the waits it
//! gave. Also how a limit is drawn on a chart of bins ([`level`]), which the candidates'
//! section shares.

use std::fmt::Write as _;

use super::html_text::Figure;
use super::html_text::{escape, key_label};
use super::{Report, TOP_KEYS};
use crate::chart::{self, Level, Series, TimeAxis};
use crate::key_timeline::KeyTimeline;
use crate::limit_stats::{LimitStats, RETRY_BUCKETS};

impl Report {
    /// The section of limit `l` (the `i`-th): heading, figures, and its charts.
    pub(super) fn limit_html(&self, i: usize, l: &LimitStats, chart: &mut Figure<'_>) -> String {
        let mut h = String::new();
        let _ = writeln!(
            h,
            "<h2>{}{} — {}, {}</h2>",
            escape(&l.name),
            if l.shadow { " (shadow)" } else { "" },
            l.algorithm,
            escape(&l.quota)
        );
        h.push_str(&self.figures_html(l));
        h.push_str(&chart(
            format!("{}-per-second", l.name),
            self.per_second_chart(l),
        ));
        if l.denied() == 0 {
            h.push_str("<p>Nothing refused.</p>\n");
            return h;
        }
        h.push_str(&chart(format!("{}-keys", l.name), keys_chart(l)));
        if let Some(t) = self.timelines.get(i).filter(|t| !t.is_empty()) {
            h.push_str(&chart(format!("{}-top-keys", l.name), timeline_chart(l, t)));
        }
        h.push_str(&chart(
            format!("{}-retry-after", l.name),
            retry_after_chart(l),
        ));
        h
    }

    /// The summary's figures for one limit, as a paragraph.
    fn figures_html(&self, l: &LimitStats) -> String {
        let (abusers, collateral) = l.refused_split(self.collateral_max());
        let mut p = format!(
            "<p class=\"figures\">{} requests, {} admitted, {} refused ({:.1} %). \
             <b>{} keys refused of {} seen</b> ({} abusers, {} collateral).",
            l.requests,
            l.admitted,
            l.denied(),
            l.deny_ratio() * 100.0,
            l.denied_key_count(),
            escape(&l.keys_seen.text()),
            abusers,
            collateral
        );
        if let Some(m) = self.minutes(l) {
            let _ = write!(
                p,
                " First minute with refusals: {} ({} refused); worst minute: {} ({} refused).",
                m.0, m.1, m.2, m.3
            );
        }
        let top: Vec<String> = l
            .top_denied(5)
            .iter()
            .map(|(k, n)| format!("{} ({n})", escape(&key_label(k))))
            .collect();
        if !top.is_empty() {
            let _ = write!(p, " Most refused: {}.", top.join(", "));
        }
        p.push_str("</p>\n");
        p
    }

    /// The limit's requests, admitted and refused over time (and the limit, when global).
    fn per_second_chart(&self, l: &LimitStats) -> String {
        let bin = chart::bin_seconds(l.per_second.len(), Some(l.period.as_secs()));
        let requests: Vec<u32> = l.per_second.iter().map(|p| p[0]).collect();
        let admitted: Vec<u32> = l.per_second.iter().map(|p| p[1]).collect();
        let levels = if l.keyed {
            Vec::new()
        } else {
            vec![level(l, bin)]
        };
        chart::lines(
            &format!("{}: requests, admitted and refused", l.name),
            "requests",
            TimeAxis {
                start_us: l.start_us,
                bin_s: bin,
            },
            &[
                Series::new("requests", chart::rebin(&requests, bin)),
                Series::new("admitted", chart::rebin(&admitted, bin)),
                Series::new("refused", chart::rebin(&l.refused_per_second(), bin)),
            ],
            &levels,
            &self.marks,
        )
    }
}

/// The limit's most refused keys, a bar each with its number.
fn keys_chart(l: &LimitStats) -> String {
    let top = l.top_denied(TOP_KEYS);
    let labels: Vec<String> = top.iter().map(|(k, _)| key_label(k)).collect();
    let counts: Vec<u64> = top.iter().map(|(_, n)| *n).collect();
    chart::bars(
        &format!(
            "{}: most refused keys (top {} of {} keys refused, of {} seen)",
            l.name,
            top.len(),
            l.denied_key_count(),
            l.keys_seen.text()
        ),
        "refused requests",
        &labels,
        &counts,
        true,
    )
}

/// The distribution of the `retry_after` the limit gave the requests it refused.
fn retry_after_chart(l: &LimitStats) -> String {
    let bucket_labels: Vec<String> = RETRY_BUCKETS.iter().map(|(_, l)| (*l).to_owned()).collect();
    chart::bars(
        &format!("{}: retry_after given to refused requests", l.name),
        "refused requests",
        &bucket_labels,
        &l.retry_after,
        false,
    )
}

/// The limit as a level on a chart of bins of `bin_s` seconds.
pub(super) fn level(l: &LimitStats, bin_s: u64) -> Level {
    let period = l.period.as_secs_f64();
    let at = l.limit as f64 * bin_s as f64 / period;
    let label = if (bin_s as f64 - period).abs() < 1e-9 {
        format!("limit: {}", l.quota)
    } else {
        format!("limit {}: {:.1} {}", l.quota, at, chart::per_bin(bin_s))
    };
    Level { at, label }
}

/// A limit's most refused keys over time: each key's requests (solid) and refusals (dashed,
/// its colour), and the limit.
fn timeline_chart(l: &LimitStats, timelines: &[KeyTimeline]) -> String {
    let len = timelines
        .iter()
        .map(|t| t.requests.len())
        .max()
        .unwrap_or(0);
    let bin = chart::bin_seconds(len, Some(l.period.as_secs()));
    let names: Vec<(String, String)> = timelines
        .iter()
        .map(|t| {
            let k = key_label(&t.key);
            (format!("{k} requests"), format!("{k} refused"))
        })
        .collect();
    let mut series = Vec::new();
    for (k, (t, (req, refd))) in timelines.iter().zip(&names).enumerate() {
        series.push(Series {
            color: Some(k),
            ..Series::new(req, chart::rebin(&t.requests, bin))
        });
        series.push(Series {
            color: Some(k),
            dashed: true,
            ..Series::new(refd, chart::rebin(&t.refused, bin))
        });
    }
    chart::lines(
        &format!(
            "{}: the {} most refused keys over time",
            l.name,
            timelines.len()
        ),
        "requests",
        TimeAxis {
            start_us: l.start_us,
            bin_s: bin,
        },
        &series,
        &[level(l, bin)],
        &[],
    )
}
