//! The HTML page's frame: its head, what was read, the expectations, the table of limits,
//! every limit's admitted side by side, and the notes; the sections between them are drawn
//! by the files beside this one. Each chart is also kept on its own, for
//! [`Report::write_html`] to write beside the page.

use std::fmt::Write as _;
use std::path::Path;

use super::html_text::{Figure, escape};
use super::suggestion_html::suggestion_html;
use super::{Report, utc};
use crate::chart::{self, Series, TimeAxis};
use crate::limit_stats::LimitStats;
use crate::replay_error::ReplayError;

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:1040px;margin:2em auto;\
color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;\
padding:.3em .6em;text-align:right}td:first-child,th:first-child{text-align:left}\
figure{margin:1em 0}.met{color:#176017}.unmet{color:#a11}tr.chosen{background:#eef6ee;\
font-weight:bold}svg{max-width:100%;height:auto}";

impl Report {
    /// The HTML page: the summary's figures and every chart, inline SVG.
    pub fn html(&self) -> String {
        self.render().0
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

    /// The page, and each chart on its own: (file name, SVG).
    fn render(&self) -> (String, Vec<(String, String)>) {
        let mut files: Vec<(String, String)> = Vec::new();
        let mut chart = |name: String, svg: String| -> String {
            files.push((format!("{name}.svg"), svg.clone()));
            format!("<figure>{svg}</figure>\n")
        };
        let mut h = self.head_html();
        h.push_str(&self.expectations_html());
        h.push_str(&self.limits_table_html());
        if let Some(s) = &self.suggestion {
            h.push_str(&suggestion_html(s, &mut chart));
        }
        if let Some(c) = &self.candidates {
            h.push_str(&self.candidates_html(c, &mut chart));
        }
        if self.limits.len() > 1 {
            h.push_str(&self.admitted_html(&mut chart));
        }
        for (i, l) in self.limits.iter().enumerate() {
            h.push_str(&self.limit_html(i, l, &mut chart));
        }
        for n in &self.notes {
            let _ = writeln!(h, "<p>{}</p>", escape(n));
        }
        h.push_str("</body></html>\n");
        (h, files)
    }

    /// The document's head, the title, what was read and its span, and the malformed lines.
    fn head_html(&self) -> String {
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
        h
    }

    /// A paragraph per expectation: what was expected, what was measured, met or not.
    fn expectations_html(&self) -> String {
        let mut h = String::new();
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
        h
    }

    /// The summary's table, a row per limit, and what abusers and collateral mean.
    fn limits_table_html(&self) -> String {
        let cmax = self.collateral_max();
        let mut h = String::from(
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
        h
    }

    /// Every limit's admitted over time on one chart, beside the requests.
    fn admitted_html(&self, chart: &mut Figure<'_>) -> String {
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
        let mut h = String::from("<h2>Admitted, every limit</h2>\n");
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
        h
    }
}

/// The requests per second every limit saw (they all see every request: the first's).
fn requests_per_second(limits: &[LimitStats]) -> Vec<u32> {
    limits
        .iter()
        .max_by_key(|l| l.per_second.len())
        .map(|l| l.per_second.iter().map(|p| p[0]).collect())
        .unwrap_or_default()
}
