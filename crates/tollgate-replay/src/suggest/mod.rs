//! `tollgate replay --suggest`: which limit to set, from the log's own keys.
//!
//! For each window length (1 s, 10 s, 1 min, 10 min, 1 h; those no longer than the log),
//! every key's busiest period is measured: the most requests it sent in one clock-aligned
//! window of that length. From their distribution comes the value that only the chosen share
//! of keys exceeds (`--refuse-share`, default the top 0.1 %). That value is a formula's
//! answer, right for a fixed window and not for the others (a sliding window or GCRA counts
//! across window edges too, and refuses more keys at the same value), so it only sets where
//! to look: candidates at 1×, 1.1×, 1.2×, 1.35×, 1.5×, 1.75× and 2× it, for each algorithm,
//! are **replayed** with the real rules, and the suggestion per algorithm is the smallest
//! candidate that refused no more than the chosen share of keys, counted exactly.
//!
//! For each candidate the suggestion says whom it refused: keys refused more than
//! `collateral_max` times (abusers: a client over its limit again and again) against keys
//! refused at most that often (collateral: an ordinary client loading a page of assets at
//! once).
//!
//! # Three passes, and memory bounded by the live keys
//!
//! The log is read three times (so `suggest` takes a way to open it again):
//!
//! 1. Each key's busiest periods: per live key, 136 bytes (its 64-bit hash, its last
//!    second, and per window length the counts of the current aligned window and the two
//!    before it, and the busiest one, two and three adjacent windows), in one of 64 hash
//!    tables (so that a table growing copies a 64th of the keys, not all of them). A key
//!    quiet for an hour (the longest window) is folded into one histogram per window
//!    length (of its busiest single window) and forgotten. Then the values the share
//!    exceeds, and the candidates.
//! 2. The same again, this time keeping, of the keys folded, only the *suspects*: keys some
//!    candidate could refuse. A key is not one when it sent no more requests in all than
//!    the candidate's value, or when its busiest windows stay within the value: for a fixed
//!    window its busiest aligned window (those are the windows it counts); for the sliding
//!    log, GCRA and the token bucket its busiest two adjacent windows (any interval of one
//!    period lies within two); for the sliding window its busiest three (it counts a period
//!    plus one sub-bucket). Those keys are provably never refused, and not decided at all.
//! 3. The candidates replayed, for the suspects' requests only, each candidate deciding
//!    only the suspects it could refuse: per live suspect, one rule state per such
//!    candidate (the rules of `tollgate::rules`, the arithmetic the memory store runs),
//!    dropped after two hours quiet (every rule is back to a full quota by then).
//!
//! Memory is then: live keys × 136 bytes (plus the tables' slack: 1.14× to 2.3×) in passes 1 and 2,
//! plus the suspects (72 bytes each) and, in pass 3, the live suspects' states (one per
//! candidate that could refuse them) and the keys refused. Nothing grows with the log's length. A key quiet for an hour and back
//! counts as two keys in the distribution (its two busy spells), which keeps pass 1 within
//! the live keys; keys are told apart by a 64-bit hash (see [`crate::key_count`]).

//!
//! The files beside this one follow the passes: `busiest.rs` measures the busiest periods
//! (passes 1 and 2), `distribution.rs` turns them into percentiles and candidate values,
//! `passes.rs` runs the three passes and replays the candidates (pass 3), and
//! `candidate_limits.rs` makes `--candidates`' limits. The result, [`Suggestion`], and its
//! text for a terminal are `crate::suggestion`'s: the report shows it without depending on
//! how it is computed (or on the log reading that computing needs).

mod busiest;
mod candidate_limits;
mod distribution;
mod passes;
mod tombstones;

use std::time::Duration;

use tollgate::Algorithm;

pub use crate::suggestion::{
    AlgorithmCandidates, Candidate, Suggestion, WindowSuggestion, share_text,
};
pub use candidate_limits::candidate_limits;
pub use passes::suggest;

/// The window lengths a key's busiest period is measured over.
pub const WINDOWS: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(600),
    Duration::from_secs(3_600),
];
const N: usize = WINDOWS.len();

/// The candidates replayed, as multiples of the value the share exceeds.
pub const FACTORS: [f64; 7] = [1.0, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0];

/// The percentiles shown of each window's busiest periods.
pub const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 100.0];

/// A key quiet this long is folded and forgotten (passes 1 and 2): the longest window.
const QUIET_S: u64 = 3_600;
/// A suspect quiet this long has every candidate's state back to full (pass 3).
const STATE_QUIET_S: u64 = 2 * 3_600;
/// How often (log time) quiet keys are looked for.
const SWEEP_S: u64 = 600;
/// How many refused keys a candidate names.
const NAMED: usize = 5;

/// What to suggest for.
#[derive(Debug, Clone)]
pub struct SuggestOptions {
    /// The share of keys the suggested limit may refuse (default 0.001: the top 0.1 %).
    pub refuse_share: f64,
    /// A key refused at most this often is collateral; more often, an abuser (default 5).
    pub collateral_max: u64,
    /// The algorithms to suggest for (default fixed_window, sliding_window, gcra, and the
    /// limit's own; token_bucket gives GCRA's answers).
    pub algorithms: Vec<Algorithm>,
}

impl Default for SuggestOptions {
    fn default() -> SuggestOptions {
        SuggestOptions {
            refuse_share: 0.001,
            collateral_max: 5,
            algorithms: vec![
                Algorithm::FixedWindow,
                Algorithm::sliding_window(),
                Algorithm::Gcra,
            ],
        }
    }
}
