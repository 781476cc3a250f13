//! The terminal summary of a report: what was read, a row per limit, whom each limit
//! refused and when, and (for a simulation) each expectation against what was measured.
//!
//! Every text a log or a config could hold goes through [`Printable`]: the summary is
//! written to a terminal.

use std::fmt::Write as _;

use super::{Report, utc};
use crate::limit_stats::LimitStats;
use crate::printable::Printable;

impl Report {
    /// The terminal summary.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        self.summary_head(&mut out);
        self.summary_table(&mut out);
        for l in self.limits.iter().filter(|l| l.denied() > 0) {
            self.summary_refusals(&mut out, l);
        }
        self.summary_most_in_a_period(&mut out);
        self.summary_expectations(&mut out);
        if let Some(s) = &self.suggestion {
            out.push_str(&s.summary());
        }
        for n in &self.notes {
            let _ = writeln!(out, "\n{}", Printable::message(n));
        }
        out
    }

    /// The title, the lines read and their span, how time is taken, and the malformed lines.
    fn summary_head(&self, out: &mut String) {
        let _ = writeln!(out, "{}", Printable::message(&self.title));
        if let Some((start, end)) = self.span_us {
            let _ = writeln!(
                out,
                "{} lines from {} to {} ({} s){}",
                self.lines,
                utc(start),
                utc(end),
                (end - start) / 1_000_000,
                if self.out_of_order > 0 {
                    format!(", {} out of time order", self.out_of_order)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            out,
            "time: each line's own; a line more than an hour from the lines around it is \
             malformed (a corrupt clock would move every later line)"
        );
        if self.malformed > 0 {
            let _ = writeln!(out, "{} malformed lines, skipped:", self.malformed);
            for m in &self.malformed_examples {
                let _ = writeln!(out, "  line {}: {}", m.line, Printable::message(&m.reason));
            }
        }
    }

    /// The table: a row per limit with its requests, admitted, denied and deny ratio.
    fn summary_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n{:<20} {:<15} {:<22} {:>10} {:>10} {:>10} {:>7}",
            "limit", "algorithm", "quota", "requests", "admitted", "denied", "ratio"
        );
        for l in &self.limits {
            let _ = writeln!(
                out,
                "{:<20} {:<15} {:<22} {:>10} {:>10} {:>10} {:>6.1}%{}",
                Printable::new(&l.name).to_string(),
                l.algorithm,
                l.quota,
                l.requests,
                l.admitted,
                l.denied(),
                l.deny_ratio() * 100.0,
                if l.shadow { "  (shadow: would-be)" } else { "" }
            );
        }
    }

    /// One limit that refused: its first and worst minutes, the keys refused (abusers and
    /// collateral), and the most refused of them.
    fn summary_refusals(&self, out: &mut String, l: &LimitStats) {
        let _ = writeln!(
            out,
            "\n{}{}:",
            Printable::new(&l.name),
            if l.shadow { " (shadow)" } else { "" }
        );
        // Clock minutes: the first is the one the first event's second is in.
        if let Some((first, n, worst, w)) = self.minutes(l) {
            let _ = writeln!(out, "  first minute with refusals: {first} ({n} refused)");
            let _ = writeln!(out, "  worst minute: {worst} ({w} refused)");
        }
        let (abusers, collateral) = l.refused_split(self.collateral_max());
        let _ = writeln!(
            out,
            "  {} keys refused of {} seen: {abusers} abusers (refused more than {} times), \
             {collateral} collateral",
            l.denied_key_count(),
            l.keys_seen.text(),
            self.collateral_max()
        );
        let top: Vec<String> = l
            .top_denied(5)
            .iter()
            .map(|(k, n)| {
                if k.is_empty() {
                    format!("(no key) ({n})")
                } else {
                    format!("{} ({n})", Printable::new(k))
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "  most refused ({} keys in all): {}",
            l.denied_key_count(),
            top.join(", ")
        );
    }

    /// The largest number each limit admitted in any one period (a simulation's measure).
    fn summary_most_in_a_period(&self, out: &mut String) {
        if !self.limits.iter().any(|l| l.max_in_any_period().is_some()) {
            return;
        }
        let _ = writeln!(out, "\nlargest number admitted in any one period:");
        for l in &self.limits {
            if let Some(max) = l.max_in_any_period() {
                let _ = writeln!(
                    out,
                    "  {:<20} {:>6} ({:.2}× the limit of {})",
                    Printable::new(&l.name).to_string(),
                    max,
                    max as f64 / l.limit as f64,
                    l.limit
                );
            }
        }
    }

    /// Each expectation (✓ or ✗), and what was measured.
    fn summary_expectations(&self, out: &mut String) {
        for e in &self.expectations {
            let _ = writeln!(
                out,
                "\n{} expected: {}\n   measured: {}",
                if e.met { "✓" } else { "✗" },
                Printable::message(&e.expected),
                Printable::message(&e.measured)
            );
        }
    }

    /// The first clock minute with refusals and the worst: (minute, refused, minute, refused).
    pub(super) fn minutes(&self, l: &LimitStats) -> Option<(String, u64, String, u64)> {
        let first_us = self.span_us.map_or(0, |s| s.0);
        let into_minute = (first_us / 1_000_000 % 60) as usize;
        let minutes = l.denied_per_minute(into_minute);
        let start = first_us - first_us % 60_000_000;
        let first = minutes.iter().position(|&n| n > 0)?;
        let worst = (0..minutes.len()).max_by_key(|&i| (minutes[i], usize::MAX - i))?;
        Some((
            utc(start + first as u64 * 60_000_000),
            minutes[first],
            utc(start + worst as u64 * 60_000_000),
            minutes[worst],
        ))
    }
}
