//! A replay's or a simulation's results: a terminal summary, and an HTML page with SVG charts
//! (`--report DIR` writes `DIR/index.html`; the page is one file, no script, nothing fetched).
//!
//! The summary goes to a terminal and quotes the log (keys, malformed lines): every text in
//! it that a log or a config could hold is printed through [`Printable`], escaped and cut, so a
//! hostile log can neither send the terminal an escape sequence, nor forge a line of the
//! report, nor make a line of it megabytes long.

use std::fmt::Write as _;
use std::path::Path;

use crate::chart::{self, Level, Mark, Series, TimeAxis};
use crate::limit_stats::{LimitStats, RETRY_BUCKETS, human};
use crate::log_reader::Malformed;
use crate::printable::Printable;
use crate::replay_error::ReplayError;
use crate::suggest::{Suggestion, share_text};
use crate::timeline::KeyTimeline;

/// How many malformed lines a report shows (all are counted).
pub const MALFORMED_SHOWN: usize = 10;
/// How many keys the "most refused" lists and charts show.
pub const TOP_KEYS: usize = 20;
/// How many of the most refused keys get a timeline.
pub const TIMELINE_KEYS: usize = 5;
/// A key refused at most this often is collateral, by default; more often, an abuser.
pub const COLLATERAL_MAX: u64 = 5;

/// Several values of one limit, replayed side by side (`--candidates`).
#[derive(Debug, Clone, Default)]
pub struct CandidateSet {
    /// The limit's name.
    pub of: String,
    /// The candidates' places in [`Report::limits`] (the limit itself first).
    pub limits: Vec<usize>,
}

/// What a scenario should show, and whether it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    /// What is expected, in words (`fixed_window admits about 2× the limit across the edge`).
    pub expected: String,
    /// What was measured, in words.
    pub measured: String,
    /// Whether the measurement is what was expected.
    pub met: bool,
}

/// The results of a replay or a simulation.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What was run (`replay of access.log`, `simulate burst-at-edge`).
    pub title: String,
    /// Lines or events read.
    pub lines: u64,
    /// Lines that could not be read.
    pub malformed: u64,
    /// The first [`MALFORMED_SHOWN`] of them.
    pub malformed_examples: Vec<Malformed>,
    /// Events decided at a later time than their own.
    pub out_of_order: u64,
    /// The first event's second and the last event's time (µs since the epoch).
    pub span_us: Option<(u64, u64)>,
    /// Each limit's results.
    pub limits: Vec<LimitStats>,
    /// A simulation's expected outcomes.
    pub expectations: Vec<Expectation>,
    /// Anything else worth saying.
    pub notes: Vec<String>,
    /// Instants marked on the time charts (a window's edge).
    pub marks: Vec<Mark>,
    /// Suggested limits (`--suggest`).
    pub suggestion: Option<Suggestion>,
    /// Per limit, its most refused keys over time (empty when not read).
    pub timelines: Vec<Vec<KeyTimeline>>,
    /// Candidate values of one limit, side by side.
    pub candidates: Option<CandidateSet>,
    /// A key refused at most this often is collateral ([`COLLATERAL_MAX`] when `None`).
    pub collateral_max: Option<u64>,
}

impl Report {
    /// The terminal summary.
    pub fn summary(&self) -> String {
        let mut out = String::new();
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
        for l in self.limits.iter().filter(|l| l.denied() > 0) {
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
        if self.limits.iter().any(|l| l.max_in_any_period().is_some()) {
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
        for e in &self.expectations {
            let _ = writeln!(
                out,
                "\n{} expected: {}\n   measured: {}",
                if e.met { "✓" } else { "✗" },
                Printable::message(&e.expected),
                Printable::message(&e.measured)
            );
        }
        if let Some(s) = &self.suggestion {
            out.push_str(&s.summary());
        }
        for n in &self.notes {
            let _ = writeln!(out, "\n{}", Printable::message(n));
        }
        out
    }

    /// The HTML page: the summary's figures and every chart, inline SVG.
    pub fn html(&self) -> String {
        self.render().0
    }

    /// A key refused at most this often is collateral.
    pub fn collateral_max(&self) -> u64 {
        self.collateral_max.unwrap_or(COLLATERAL_MAX)
    }

    /// The page, and each chart on its own: (file name, SVG).
    fn render(&self) -> (String, Vec<(String, String)>) {
        let mut files: Vec<(String, String)> = Vec::new();
        let mut chart = |name: String, svg: String| -> String {
            files.push((format!("{name}.svg"), svg.clone()));
            format!("<figure>{svg}</figure>\n")
        };
        let cmax = self.collateral_max();
        let mut h = String::new();
        let _ = write!(
            h,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{t}</title><style>{CSS}</style></head><body><h1>{t}</h1>\n",
            t = escape(&self.title)
        );
        let _ = write!(h, "<p>{} lines", self.lines);
        if let Some((start, end)) = self.span_us {
            let _ = write!(
                h,
                " from {} to {} ({} s)",
                utc(start),
                utc(end),
                (end - start) / 1_000_000
            );
        }
        let _ = writeln!(
            h,
            "; {} malformed; {} out of time order. Times are UTC; counts in the charts are \
             whole requests per bin (the bin is said on each chart).</p>",
            self.malformed, self.out_of_order
        );
        if !self.malformed_examples.is_empty() {
            h.push_str("<details><summary>Malformed lines</summary><ul>");
            for m in &self.malformed_examples {
                let _ = write!(h, "<li>line {}: {}</li>", m.line, escape(&m.reason));
            }
            h.push_str("</ul></details>\n");
        }
        for e in &self.expectations {
            let _ = writeln!(
                h,
                "<p class=\"{}\"><b>{}</b> Expected: {}. Measured: {}.</p>",
                if e.met { "met" } else { "unmet" },
                if e.met { "✓" } else { "✗" },
                escape(&e.expected),
                escape(&e.measured)
            );
        }
        h.push_str(
            "<table><tr><th>limit</th><th>algorithm</th><th>quota</th><th>requests</th>\
             <th>admitted</th><th>denied</th><th>deny ratio</th><th>keys refused of seen</th>\
             <th>abusers</th><th>collateral</th><th>most in one period</th></tr>\n",
        );
        for l in &self.limits {
            let (abusers, collateral) = l.refused_split(cmax);
            let _ = writeln!(
                h,
                "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{:.1} %</td><td>{} of {}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&l.name),
                if l.shadow { " (shadow)" } else { "" },
                l.algorithm,
                escape(&l.quota),
                l.requests,
                l.admitted,
                l.denied(),
                l.deny_ratio() * 100.0,
                l.denied_key_count(),
                escape(&l.keys_seen.text()),
                abusers,
                collateral,
                l.max_in_any_period().map_or("–".to_owned(), |m| format!(
                    "{m} ({:.2}×)",
                    m as f64 / l.limit as f64
                ))
            );
        }
        let _ = writeln!(
            h,
            "</table>\n<p>Abusers: keys refused more than {cmax} times; collateral: keys \
             refused {cmax} times or fewer (an ordinary client caught by a burst).</p>"
        );
        if let Some(s) = &self.suggestion {
            h.push_str(&suggestion_html(s, &mut chart));
        }
        if let Some(c) = &self.candidates {
            h.push_str(&self.candidates_html(c, &mut chart));
        }
        if self.limits.len() > 1 {
            let start = self.span_us.map_or(0, |s| s.0);
            let len = self
                .limits
                .iter()
                .map(|l| l.per_second.len())
                .max()
                .unwrap_or(0);
            let bin = chart::bin_seconds(len, None);
            let mut series: Vec<Series<'_>> = vec![Series::new(
                "requests",
                chart::rebin(&requests_per_second(&self.limits), bin),
            )];
            series.extend(self.limits.iter().map(|l| {
                let admitted: Vec<u32> = l.per_second.iter().map(|p| p[1]).collect();
                Series::new(&l.name, chart::rebin(&admitted, bin))
            }));
            h.push_str("<h2>Admitted, every limit</h2>\n");
            h.push_str(&chart(
                "admitted".into(),
                chart::lines(
                    "admitted, every limit",
                    "admitted",
                    TimeAxis {
                        start_us: start,
                        bin_s: bin,
                    },
                    &series,
                    &[],
                    &self.marks,
                ),
            ));
        }
        for (i, l) in self.limits.iter().enumerate() {
            let _ = writeln!(
                h,
                "<h2>{}{} — {}, {}</h2>",
                escape(&l.name),
                if l.shadow { " (shadow)" } else { "" },
                l.algorithm,
                escape(&l.quota)
            );
            h.push_str(&self.figures_html(l));
            let bin = chart::bin_seconds(l.per_second.len(), Some(l.period.as_secs()));
            let requests: Vec<u32> = l.per_second.iter().map(|p| p[0]).collect();
            let admitted: Vec<u32> = l.per_second.iter().map(|p| p[1]).collect();
            let levels = if l.keyed {
                Vec::new()
            } else {
                vec![level(l, bin)]
            };
            h.push_str(&chart(
                format!("{}-per-second", l.name),
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
                ),
            ));
            if l.denied() == 0 {
                h.push_str("<p>Nothing refused.</p>\n");
                continue;
            }
            let top = l.top_denied(TOP_KEYS);
            let labels: Vec<String> = top.iter().map(|(k, _)| key_label(k)).collect();
            let counts: Vec<u64> = top.iter().map(|(_, n)| *n).collect();
            h.push_str(&chart(
                format!("{}-keys", l.name),
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
                ),
            ));
            if let Some(t) = self.timelines.get(i).filter(|t| !t.is_empty()) {
                h.push_str(&chart(format!("{}-top-keys", l.name), timeline_chart(l, t)));
            }
            let bucket_labels: Vec<String> =
                RETRY_BUCKETS.iter().map(|(_, l)| (*l).to_owned()).collect();
            h.push_str(&chart(
                format!("{}-retry-after", l.name),
                chart::bars(
                    &format!("{}: retry_after given to refused requests", l.name),
                    "refused requests",
                    &bucket_labels,
                    &l.retry_after,
                    false,
                ),
            ));
        }
        for n in &self.notes {
            let _ = writeln!(h, "<p>{}</p>", escape(n));
        }
        h.push_str("</body></html>\n");
        (h, files)
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

    /// The first clock minute with refusals and the worst: (minute, refused, minute, refused).
    fn minutes(&self, l: &LimitStats) -> Option<(String, u64, String, u64)> {
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

    /// The candidates of one limit side by side: their admitted and refused over time, and
    /// whom each refused.
    fn candidates_html(
        &self,
        c: &CandidateSet,
        chart: &mut dyn FnMut(String, String) -> String,
    ) -> String {
        let limits: Vec<&LimitStats> = c
            .limits
            .iter()
            .filter_map(|&i| self.limits.get(i))
            .collect();
        let Some(first) = limits.first() else {
            return String::new();
        };
        let cmax = self.collateral_max();
        let mut h = format!(
            "<h2>Candidates for {}: side by side</h2>\n<p>The same limit ({}, {}) at {} \
             values, each replayed on its own.</p>\n",
            escape(&c.of),
            first.algorithm,
            escape(&first.quota),
            limits.len()
        );
        let len = limits.iter().map(|l| l.per_second.len()).max().unwrap_or(0);
        let bin = chart::bin_seconds(len, Some(first.period.as_secs()));
        let requests: Vec<u32> = first.per_second.iter().map(|p| p[0]).collect();
        let mut names: Vec<String> = Vec::new();
        for l in &limits {
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
        h.push_str(&chart(
            format!("{}-candidates", c.of),
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
            ),
        ));
        let labels: Vec<String> = limits.iter().map(|l| l.quota.clone()).collect();
        let split: Vec<(u64, u64)> = limits.iter().map(|l| l.refused_split(cmax)).collect();
        let seen = first.keys_seen.text();
        h.push_str(&chart(
            format!("{}-candidates-keys", c.of),
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
            ),
        ));
        h
    }
    /// Writes [`Report::html`] to `dir/index.html` (creating `dir`), and each chart beside
    /// it as an SVG file of its own (`admitted.svg`, `<limit>-per-second.svg`,
    /// `<limit>-keys.svg`, `<limit>-retry-after.svg`, for docs); returns the page's path.
    ///
    /// # Errors
    /// [`ReplayError::Write`].
    pub fn write_html(&self, dir: &Path) -> Result<std::path::PathBuf, ReplayError> {
        let path = dir.join("index.html");
        let (html, files) = self.render();
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            for (name, svg) in &files {
                std::fs::write(dir.join(name), svg)?;
            }
            std::fs::write(&path, &html)
        };
        write().map_err(|source| ReplayError::Write {
            path: path.display().to_string(),
            source,
        })?;
        Ok(path)
    }
}

/// A key as charts show it.
fn key_label(k: &str) -> String {
    if k.is_empty() {
        "(no key)".to_owned()
    } else {
        Printable::new(k).to_string()
    }
}

/// The limit as a level on a chart of bins of `bin_s` seconds.
fn level(l: &LimitStats, bin_s: u64) -> Level {
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

/// The suggestion's section: per window length, the busiest periods' percentiles, the
/// suggestion per algorithm, and every candidate replayed with whom it refused.
fn suggestion_html(s: &Suggestion, chart: &mut dyn FnMut(String, String) -> String) -> String {
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
    h.push_str("<table><tr><th>window</th>");
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
    for w in &s.windows {
        let tried: usize = w.algorithms.iter().map(|a| a.candidates.len()).sum();
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
                let top: Vec<String> = c
                    .top
                    .iter()
                    .map(|(k, n)| format!("{} ({n})", escape(&key_label(k))))
                    .collect();
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
        let abusers_name = format!("abusers (refused > {} times)", s.collateral_max);
        let collateral_name = format!("collateral (≤ {} times)", s.collateral_max);
        h.push_str(&chart(
            format!("suggest-{}", human(w.window)),
            chart::stacked(
                &format!(
                    "candidates per {}: keys refused (◀ suggested), of {} keys",
                    human(w.window),
                    s.keys
                ),
                "keys refused",
                &labels,
                &[(&abusers_name, abusers), (&collateral_name, collateral)],
                Some(Level {
                    at: s.target_keys as f64,
                    label: format!("{} of keys: {}", share_text(s.refuse_share), s.target_keys),
                }),
                true,
            ),
        ));
    }
    h
}

/// The requests per second every limit saw (they all see every request: the first's).
fn requests_per_second(limits: &[LimitStats]) -> Vec<u32> {
    limits
        .iter()
        .max_by_key(|l| l.per_second.len())
        .map(|l| l.per_second.iter().map(|p| p[0]).collect())
        .unwrap_or_default()
}

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:1040px;margin:2em auto;\
color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;\
padding:.3em .6em;text-align:right}td:first-child,th:first-child{text-align:left}\
figure{margin:1em 0}.met{color:#176017}.unmet{color:#a11}tr.chosen{background:#eef6ee;\
font-weight:bold}svg{max-width:100%;height:auto}";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `2026-10-10 13:55:36Z` for µs since the epoch.
pub fn utc(micros: u64) -> String {
    let secs = micros / 1_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Howard Hinnant's inverse of days-from-civil.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_as_utc() {
        assert_eq!(utc(1_791_640_536_000_000), "2026-10-10 13:55:36Z");
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400_000_000), "2000-02-29 00:00:00Z");
    }
}
