//! A replay's or a simulation's results: a terminal summary, and an HTML page with SVG charts
//! (`--report DIR` writes `DIR/index.html`; the page is one file, no script, nothing fetched).
//!
//! The summary goes to a terminal and quotes the log (keys, malformed lines): every text in
//! it that a log or a config could hold is printed through [`Printable`], escaped and cut, so a
//! hostile log can neither send the terminal an escape sequence, nor forge a line of the
//! report, nor make a line of it megabytes long.
//!
//! This module holds what a report *is*; the files beside it each write one part of it, so
//! that a change to one section of the page or of the summary is read in one place:
//! [`summary`](Report::summary) in `summary.rs`, the page's frame in `page.rs`, and its
//! sections (each limit, the suggestion, the candidates) in files of their own.
//!
//! [`Printable`]: crate::printable::Printable

mod candidates_html;

mod html_text;
mod limit_html;
mod page;
mod suggestion_html;
mod summary;

use crate::chart::Mark;
use crate::key_timeline::KeyTimeline;
use crate::limit_stats::LimitStats;
use crate::log_reader::Malformed;
use crate::suggestion::Suggestion;

pub use crate::utc::utc;

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
    /// A key refused at most this often is collateral.
    pub fn collateral_max(&self) -> u64 {
        self.collateral_max.unwrap_or(COLLATERAL_MAX)
    }
}
