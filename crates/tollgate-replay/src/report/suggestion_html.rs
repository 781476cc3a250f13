//! The page's section for `--suggest`: per window length, the busiest periods' percentiles
//! and the suggestion per algorithm, then every candidate replayed (a folded table) and a
//! chart of whom each refused, so that a suggestion can be checked against its neighbours.

use std::fmt::Write as _;

use super::html_text::Figure;
use super::html_text::{escape, key_label};
use crate::chart::{self, Level};
use crate::limit_stats::human;
use crate::suggestion::{AlgorithmCandidates, Candidate, Suggestion, WindowSuggestion, share_text};

/// The suggestion's section: per window length, the busiest periods' percentiles, the
/// suggestion per algorithm, and every candidate replayed with whom it refused.
pub(super) fn suggestion_html(s: &Suggestion, chart: &mut Figure<'_>) -> String {
    let mut h = intro_html(s);
    h.push_str(&percentiles_table_html(s));
    for w in &s.windows {
        h.push_str(&window_html(s, w, chart));
    }
    h
}

/// The heading, and how the suggestions were chosen (the share, the keys, the suspects).
fn intro_html(s: &Suggestion) -> String {
    let mut h = String::new();
    let key = if s.key_parts.is_empty() {
        "no key (one global counter)".to_owned()
    } else {
        s.key_parts.join(",")
    };
    let _ = writeln!(
        h,
        "<h2>Suggested limits, keyed as {} ({})</h2>\n<p>Each suggestion is the smallest \
         candidate that, <b>replayed</b> with the real rules, refused at most {} of keys \
         ({} of {} keys; {} distinct). Candidates are 1× to 2× the value only that share of \
         keys exceeded in their busiest clock-aligned window. Abusers: keys refused more \
         than {} times; collateral: {} times or fewer. {} suspect keys ({} requests) were \
         replayed; every other key is below what any candidate could refuse.</p>",
        escape(&s.limit),
        escape(&key),
        share_text(s.refuse_share),
        s.target_keys,
        s.keys,
        escape(&s.distinct.text()),
        s.collateral_max,
        s.collateral_max,
        s.suspects,
        s.suspect_requests
    );
    h
}

/// A row per window length: its busiest periods' percentiles, and the suggestion per
/// algorithm.
fn percentiles_table_html(s: &Suggestion) -> String {
    let mut h = String::from("<table><tr><th>window</th>");
    for (p, _) in s.windows.first().map_or(&[][..], |w| &w.percentiles[..]) {
        if *p >= 100.0 {
            h.push_str("<th>max</th>");
        } else {
            let _ = write!(h, "<th>p{p}</th>");
        }
    }
    h.push_str("<th>suggested</th></tr>\n");
    for w in &s.windows {
        let _ = write!(h, "<tr><td>busiest {} of a key</td>", human(w.window));
        for (_, v) in &w.percentiles {
            let _ = write!(h, "<td>{v}</td>");
        }
        let picks: Vec<String> = w
            .algorithms
            .iter()
            .map(|a| match a.chosen {
                Some(c) => format!(
                    "{} {}/{}",
                    a.algorithm.name(),
                    a.candidates[c].limit,
                    human(w.window)
                ),
                None => format!("{} –", a.algorithm.name()),
            })
            .collect();
        let _ = writeln!(h, "<td>{}</td></tr>", picks.join("<br>"));
    }
    h.push_str("</table>\n");
    h
}

/// One window length: every candidate replayed (a folded table), and the keys each refused
/// (a chart, the suggestion marked ◀).
fn window_html(s: &Suggestion, w: &WindowSuggestion, chart: &mut Figure<'_>) -> String {
    let tried: usize = w.algorithms.iter().map(|a| a.candidates.len()).sum();
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<h3>Per {}</h3>\n<details><summary>The {tried} candidates replayed</summary>",
        human(w.window)
    );
    h.push_str(
        "<table><tr><th>algorithm</th><th>limit</th><th>keys refused</th><th>abusers</th>\
         <th>collateral</th><th>requests refused</th><th>most refused</th></tr>\n",
    );
    let mut labels = Vec::new();
    let (mut abusers, mut collateral) = (Vec::new(), Vec::new());
    for a in &w.algorithms {
        for (i, c) in a.candidates.iter().enumerate() {
            let chosen = a.chosen == Some(i);
            h.push_str(&candidate_row_html(w, a, c, chosen));
            labels.push(format!(
                "{} {}/{}{}",
                a.algorithm.name(),
                c.limit,
                human(w.window),
                if chosen { " ◀" } else { "" }
            ));
            abusers.push(c.abusers);
            collateral.push(c.collateral);
        }
    }
    h.push_str("</table></details>\n");
    h.push_str(&chart(
        format!("suggest-{}", human(w.window)),
        refused_chart(s, w, &labels, abusers, collateral),
    ));
    h
}

/// A candidate's row: its limit (marked when suggested), whom it refused and how often.
fn candidate_row_html(
    w: &WindowSuggestion,
    a: &AlgorithmCandidates,
    c: &Candidate,
    chosen: bool,
) -> String {
    let top: Vec<String> = c
        .top
        .iter()
        .map(|(k, n)| format!("{} ({n})", escape(&key_label(k))))
        .collect();
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<tr{}><td>{}</td><td>{} per {}{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td></tr>",
        if chosen { " class=\"chosen\"" } else { "" },
        a.algorithm.name(),
        c.limit,
        human(w.window),
        if chosen { " ← suggested" } else { "" },
        c.refused_keys(),
        c.abusers,
        c.collateral,
        c.refused_requests,
        top.join(", ")
    );
    h
}

/// The keys each candidate of a window refused, abusers and collateral stacked, and the
/// share as a dashed line.
fn refused_chart(
    s: &Suggestion,
    w: &WindowSuggestion,
    labels: &[String],
    abusers: Vec<u64>,
    collateral: Vec<u64>,
) -> String {
    let abusers_name = format!("abusers (refused > {} times)", s.collateral_max);
    let collateral_name = format!("collateral (≤ {} times)", s.collateral_max);
    chart::stacked(
        &format!(
            "candidates per {}: keys refused (◀ suggested), of {} keys",
            human(w.window),
            s.keys
        ),
        "keys refused",
        labels,
        &[(&abusers_name, abusers), (&collateral_name, collateral)],
        Some(Level {
            at: s.target_keys as f64,
            label: format!("{} of keys: {}", share_text(s.refuse_share), s.target_keys),
        }),
        true,
    )
}
