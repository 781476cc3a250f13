//! [`Suggestion`]: what `tollgate replay --suggest` found (`crate::suggest` computes it),
//! and its text for a terminal (`summary.rs`). Apart from the computation so that the report,
//! which shows it, does not depend on the passes over the log.

mod summary;

use std::time::Duration;

use tollgate::Algorithm;

use crate::key_count::KeyCount;

pub use summary::share_text;

/// One candidate limit, replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its limit per window.
    pub limit: u64,
    /// Requests it refused.
    pub refused_requests: u64,
    /// Keys it refused more than `collateral_max` times.
    pub abusers: u64,
    /// Keys it refused at most `collateral_max` times.
    pub collateral: u64,
    /// The keys it refused most (at most five), most first.
    pub top: Vec<(String, u64)>,
}

impl Candidate {
    /// Keys refused at least once.
    pub fn refused_keys(&self) -> u64 {
        self.abusers + self.collateral
    }
}

/// One algorithm's candidates at one window length.
#[derive(Debug, Clone)]
pub struct AlgorithmCandidates {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Its candidates, by limit.
    pub candidates: Vec<Candidate>,
    /// The suggestion: the smallest candidate refusing no more than the share (its index).
    pub chosen: Option<usize>,
}

/// One window length.
#[derive(Debug, Clone)]
pub struct WindowSuggestion {
    /// The window's length.
    pub window: Duration,
    /// The busiest period's percentiles over keys ([`crate::suggest::PERCENTILES`]).
    pub percentiles: Vec<(f64, u64)>,
    /// The smallest value no more than the share of keys exceeded in their busiest window.
    pub base: u64,
    /// Per algorithm.
    pub algorithms: Vec<AlgorithmCandidates>,
}

/// A suggestion of limits for one key.
#[derive(Debug, Clone)]
pub struct Suggestion {
    /// The limit whose key is used.
    pub limit: String,
    /// Its key parts.
    pub key_parts: Vec<String>,
    /// Lines read (one pass).
    pub lines: u64,
    /// Lines decided.
    pub decided: u64,
    /// Keys in the distribution (a key quiet for an hour and back counts twice).
    pub keys: u64,
    /// Distinct keys.
    pub distinct: KeyCount,
    /// The share of keys a suggestion may refuse.
    pub refuse_share: f64,
    /// That share in keys (rounded down).
    pub target_keys: u64,
    /// A key refused at most this often is collateral.
    pub collateral_max: u64,
    /// The most keys held at once in pass 1 (the live keys: those heard from in the last
    /// hour, give or take a sweep's ten minutes).
    pub peak_live: u64,
    /// Keys some candidate could refuse, replayed in pass 3.
    pub suspects: u64,
    /// Their requests, decided in pass 3.
    pub suspect_requests: u64,
    /// Per window length.
    pub windows: Vec<WindowSuggestion>,
}
