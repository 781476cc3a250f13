//! A replay's or a simulation's results: a terminal summary, and an HTML page with SVG charts
//! (`--report DIR` writes `DIR/index.html`; the page is one file, no script, nothing fetched).
//!
//! The summary goes to a terminal and quotes the log (keys, malformed lines): every text in
//! it that a log or a config could hold is printed through [`Printable`], escaped and cut, so a
//! hostile log can neither send the terminal an escape sequence, nor forge a line of the
//! report, nor make a line of it megabytes long.

use std::fmt::Write as _;
use std::path::Path;

use crate::chart::{self, Series};
use crate::limit_stats::{LimitStats, RETRY_BUCKETS};
use crate::log_reader::Malformed;
use crate::printable::Printable;
use crate::replay_error::ReplayError;

/// How many malformed lines a report shows (all are counted).
pub const MALFORMED_SHOWN: usize = 10;
/// How many keys the "most refused" lists and charts show.
pub const TOP_KEYS: usize = 20;

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
            let first_us = self.span_us.map_or(0, |s| s.0);
            let into_minute = (first_us / 1_000_000 % 60) as usize;
            let minutes = l.denied_per_minute(into_minute);
            let start = first_us - first_us % 60_000_000;
            if let Some(first) = minutes.iter().position(|&n| n > 0) {
                let worst = (0..minutes.len()).max_by_key(|&i| (minutes[i], usize::MAX - i));
                let _ = writeln!(
                    out,
                    "  first minute with refusals: {} ({} refused)",
                    utc(start + first as u64 * 60_000_000),
                    minutes[first]
                );
                if let Some(w) = worst {
                    let _ = writeln!(
                        out,
                        "  worst minute: {} ({} refused)",
                        utc(start + w as u64 * 60_000_000),
                        minutes[w]
                    );
                }
            }
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
        for n in &self.notes {
            let _ = writeln!(out, "\n{}", Printable::message(n));
        }
        out
    }

    /// The HTML page: the summary's figures and every chart, inline SVG.
    pub fn html(&self) -> String {
        self.render().0
    }

    /// The page, and each chart on its own: (file name, SVG).
    fn render(&self) -> (String, Vec<(String, String)>) {
        let mut files: Vec<(String, String)> = Vec::new();
        let mut chart = |name: String, svg: String| -> String {
            files.push((format!("{name}.svg"), svg.clone()));
            svg
        };
        let mut h = String::new();
        let _ = write!(
            h,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{t}</title><style>{CSS}</style></head><body><h1>{t}</h1>\n",
            t = escape(&self.title)
        );
        let _ = write!(h, "<p>{} lines", self.lines);
        if let Some((start, end)) = self.span_us {
            let _ = write!(h, " from {} to {}", utc(start), utc(end));
        }
        let _ = writeln!(
            h,
            "; {} malformed; {} out of time order.</p>",
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
             <th>admitted</th><th>denied</th><th>deny ratio</th><th>most in one period</th></tr>\n",
        );
        for l in &self.limits {
            let _ = writeln!(
                h,
                "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{:.1} %</td><td>{}</td></tr>",
                escape(&l.name),
                if l.shadow { " (shadow)" } else { "" },
                l.algorithm,
                escape(&l.quota),
                l.requests,
                l.admitted,
                l.denied(),
                l.deny_ratio() * 100.0,
                l.max_in_any_period().map_or("–".to_owned(), |m| format!(
                    "{m} ({:.2}×)",
                    m as f64 / l.limit as f64
                ))
            );
        }
        h.push_str("</table>\n");
        if self.limits.len() > 1 {
            let mut series: Vec<Series<'_>> = vec![Series {
                name: "requests",
                per_second: requests_per_second(&self.limits),
            }];
            series.extend(self.limits.iter().map(|l| Series {
                name: &l.name,
                per_second: l.per_second.iter().map(|p| f64::from(p[1])).collect(),
            }));
            h.push_str("<h2>Admitted per second, every limit</h2>\n<figure>");
            h.push_str(&chart(
                "admitted".into(),
                chart::lines("admitted per second", "per second", &series),
            ));
            h.push_str("</figure>\n");
        }
        for l in &self.limits {
            let _ = write!(
                h,
                "<h2>{}{} — {}, {}</h2>\n<figure>",
                escape(&l.name),
                if l.shadow { " (shadow)" } else { "" },
                l.algorithm,
                escape(&l.quota)
            );
            h.push_str(&chart(
                format!("{}-per-second", l.name),
                chart::lines(
                    &format!("{}: requests and admitted per second", l.name),
                    "per second",
                    &[
                        Series {
                            name: "requests",
                            per_second: l.per_second.iter().map(|p| f64::from(p[0])).collect(),
                        },
                        Series {
                            name: "admitted",
                            per_second: l.per_second.iter().map(|p| f64::from(p[1])).collect(),
                        },
                    ],
                ),
            ));
            h.push_str("</figure>\n");
            if l.denied() == 0 {
                h.push_str("<p>Nothing refused.</p>\n");
                continue;
            }
            let top = l.top_denied(TOP_KEYS);
            let labels: Vec<String> = top
                .iter()
                .map(|(k, _)| {
                    if k.is_empty() {
                        "(no key)".to_owned()
                    } else {
                        Printable::new(k).to_string()
                    }
                })
                .collect();
            let counts: Vec<u64> = top.iter().map(|(_, n)| *n).collect();
            h.push_str("<figure>");
            h.push_str(&chart(
                format!("{}-keys", l.name),
                chart::bars(
                    &format!("{}: most refused keys (top {})", l.name, TOP_KEYS),
                    "refused",
                    &labels,
                    &counts,
                    true,
                ),
            ));
            h.push_str("</figure>\n<figure>");
            let bucket_labels: Vec<String> =
                RETRY_BUCKETS.iter().map(|(_, l)| (*l).to_owned()).collect();
            h.push_str(&chart(
                format!("{}-retry-after", l.name),
                chart::bars(
                    &format!("{}: retry_after given to refused requests", l.name),
                    "refused",
                    &bucket_labels,
                    &l.retry_after,
                    false,
                ),
            ));
            h.push_str("</figure>\n");
        }
        for n in &self.notes {
            let _ = writeln!(h, "<p>{}</p>", escape(n));
        }
        h.push_str("</body></html>\n");
        (h, files)
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

/// The requests per second every limit saw (they all see every request: the first's).
fn requests_per_second(limits: &[LimitStats]) -> Vec<f64> {
    limits
        .iter()
        .max_by_key(|l| l.per_second.len())
        .map(|l| l.per_second.iter().map(|p| f64::from(p[0])).collect())
        .unwrap_or_default()
}

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;\
color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;\
padding:.3em .6em;text-align:right}td:first-child,th:first-child{text-align:left}\
figure{margin:1em 0}.met{color:#176017}.unmet{color:#a11}";

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
