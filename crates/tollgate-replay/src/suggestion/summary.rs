//! A suggestion as the terminal shows it: how it was chosen, then per window length the
//! busiest periods' percentiles and a line per algorithm — the suggested limit and whom it
//! refused, or that no candidate refused few enough keys.

use std::fmt::Write as _;

use super::{AlgorithmCandidates, Candidate, Suggestion, WindowSuggestion};
use crate::limit_stats::human;
use crate::printable::Printable;

/// `0.1 %`, `5 %`.
pub fn share_text(share: f64) -> String {
    let pct = share * 100.0;
    let text = format!("{pct:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} %")
}

impl Suggestion {
    /// The terminal text.
    pub fn summary(&self) -> String {
        let mut out = self.summary_head();
        for w in &self.windows {
            window_summary(&mut out, w);
        }
        out
    }

    /// What the suggestions are for (the key, the share) and how they were found.
    fn summary_head(&self) -> String {
        let mut out = String::new();
        let key = if self.key_parts.is_empty() {
            "no key (one global counter)".to_owned()
        } else {
            self.key_parts.join(",")
        };
        let _ = writeln!(
            out,
            "\nsuggested limits, keyed as {} ({}), to refuse at most {} of keys ({} of {} keys; {} distinct):",
            Printable::new(&self.limit),
            Printable::new(&key),
            share_text(self.refuse_share),
            self.target_keys,
            self.keys,
            self.distinct.text()
        );
        let _ = writeln!(
            out,
            "  each from replaying candidates with the real rules ({} suspects, {} of their requests, \
             decided; every other key is below what any candidate could refuse). A key refused \
             at most {} times is collateral, more often an abuser.",
            self.suspects, self.suspect_requests, self.collateral_max
        );
        out
    }
}

/// One window length: the busiest periods' percentiles, and a line per algorithm.
fn window_summary(out: &mut String, w: &WindowSuggestion) {
    let p: Vec<String> = w
        .percentiles
        .iter()
        .map(|(p, v)| {
            if *p >= 100.0 {
                format!("max {v}")
            } else {
                format!("p{p} {v}")
            }
        })
        .collect();
    let _ = writeln!(
        out,
        "\n  per {}: busiest {} of each key: {}",
        human(w.window),
        human(w.window),
        p.join(", ")
    );
    for a in &w.algorithms {
        match a.chosen {
            Some(c) => chosen_line(out, w, a, &a.candidates[c]),
            None => none_line(out, w, a),
        }
    }
}

/// The suggested candidate of an algorithm, and whom it refused.
fn chosen_line(out: &mut String, w: &WindowSuggestion, a: &AlgorithmCandidates, c: &Candidate) {
    let _ = writeln!(
        out,
        "    {:<15} {:>8} per {:<4} refuses {} keys ({} abusers, {} collateral), {} requests{}",
        a.algorithm.name(),
        c.limit,
        human(w.window),
        c.refused_keys(),
        c.abusers,
        c.collateral,
        c.refused_requests,
        if c.top.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                c.top
                    .iter()
                    .map(|(k, n)| format!("{} ({n})", Printable::new(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
}

/// An algorithm none of whose candidates refused few enough keys: its largest, and how many
/// it refused.
fn none_line(out: &mut String, w: &WindowSuggestion, a: &AlgorithmCandidates) {
    let last = a.candidates.last();
    let _ = writeln!(
        out,
        "    {:<15} none of the candidates (up to {} per {}: {} keys refused)",
        a.algorithm.name(),
        last.map_or(0, |c| c.limit),
        human(w.window),
        last.map_or(0, Candidate::refused_keys)
    );
}
