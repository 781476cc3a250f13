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

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::BufRead;
use std::time::Duration;

use tollgate::rules::{AnyRule, AnyState};
use tollgate::{Algorithm, Limit, Quota};

use crate::key_count::{BuildPrehashed, KeyCount, hash_parts};
use crate::limit_stats::human;
use crate::printable::Printable;
use crate::replay_error::ReplayError;
use crate::replay_log::{LogOptions, Pass, each_decided, key_indices, key_text};

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
    /// The busiest period's percentiles over keys ([`PERCENTILES`]).
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

/// Per live key, in passes 1 and 2: 128 bytes, 136 with its hash (in one of 64 tables).
#[derive(Debug, Clone, Copy, Default)]
struct Busy {
    /// The second of its last request, counted from a whole hour before the log's start
    /// (so that every window length's alignment is the epoch's).
    last: u32,
    /// Per window length: the current aligned window's count and the two before it.
    cur: [[u32; 3]; N],
    /// Per window length: the busiest one, two and three adjacent aligned windows.
    max: [[u32; 3]; N],
    total: u32,
}

impl Busy {
    /// Counts a request at `second`, whose windows start at `starts` ([`window_starts`]).
    fn add(&mut self, second: u32, starts: &[u32; N]) {
        for (i, w) in WINDOWS.iter().enumerate() {
            let (w, start) = (w.as_secs() as u32, starts[i]);
            let c = &mut self.cur[i];
            if self.total > 0 && self.last < start {
                // The last request's window is not this one: one, two or more before it.
                *c = if self.last + w >= start {
                    [0, c[0], c[1]]
                } else if self.last + 2 * w >= start {
                    [0, 0, c[0]]
                } else {
                    [0, 0, 0]
                };
            }
            c[0] += 1;
            let m = &mut self.max[i];
            m[0] = m[0].max(c[0]);
            m[1] = m[1].max(c[0] + c[1]);
            m[2] = m[2].max(c[0] + c[1] + c[2]);
        }
        self.total = self.total.saturating_add(1);
        self.last = second;
    }
}

/// Where each window length's window holding `second` starts (no division per request: once
/// per second of the log).
fn window_starts(second: u32) -> [u32; N] {
    let mut starts = [0; N];
    for (s, w) in starts.iter_mut().zip(WINDOWS) {
        let w = w.as_secs() as u32;
        *s = second - second % w;
    }
    starts
}

/// What a suspect needs in pass 3: its busiest windows and total (of all its spells).
#[derive(Debug, Clone, Copy, Default)]
struct Suspect {
    max: [[u32; 3]; N],
    total: u32,
}

/// Whether a key whose busiest one, two and three adjacent aligned windows of length
/// `WINDOWS[window]` held `max`, and `total` requests in all, could be refused by
/// `algorithm` at `limit` per that length. It could not when:
/// - it sent no more than `limit` in all;
/// - fixed window (its windows are these clock-aligned ones): no window held more;
/// - sliding log, GCRA, token bucket (burst = limit): no two adjacent windows held more,
///   since any interval of one period lies within two (for GCRA, no more than `limit` in
///   any period keeps a burst of `limit` from running out);
/// - sliding window: no three held more, since it counts a span of the period plus one
///   sub-bucket, which lies within three.
fn could_refuse(
    max: &[[u32; 3]; N],
    total: u32,
    window: usize,
    algorithm: Algorithm,
    limit: u64,
) -> bool {
    let bound = match algorithm {
        Algorithm::FixedWindow => max[window][0],
        Algorithm::SlidingWindow { .. } => max[window][2],
        Algorithm::SlidingLog | Algorithm::TokenBucket | Algorithm::Gcra => max[window][1],
    };
    u64::from(bound) > limit && u64::from(total) > limit
}

/// A live suspect in pass 3: its states, one per candidate that could refuse it.
#[derive(Debug)]
struct Live {
    last: u64,
    states: Vec<(u32, AnyState)>,
}

/// One pass of busiest periods: `fold` gets every key's, once it is quiet or at the end.
fn busiest_pass<R: BufRead>(
    reader: R,
    options: &LogOptions,
    parts: &[(Box<str>, usize)],
    distinct: Option<&mut KeyCount>,
    peak_live: &mut u64,
    fold: &mut dyn FnMut(u64, &Busy),
) -> Result<Pass, ReplayError> {
    // Sharded by the hash's top bits, so that a shard growing copies 1/64 of the keys, not
    // all of them (one table of ten million would hold its old and new tables at once).
    const SHARDS: usize = 64;
    let mut live: Vec<HashMap<u64, Busy, BuildPrehashed>> =
        (0..SHARDS).map(|_| HashMap::default()).collect();
    let mut next_sweep = 0_u32;
    let mut base = None;
    let (mut starts, mut starts_of) = (window_starts(0), 0);
    let mut distinct = distinct;
    let held = |live: &[HashMap<u64, Busy, BuildPrehashed>]| {
        live.iter().map(|m| m.len() as u64).sum::<u64>()
    };
    let pass = each_decided(reader, options, &mut |now, start, event| {
        let base = *base.get_or_insert(start / 1_000_000 / 3_600 * 3_600);
        let second = (now / 1_000_000 - base) as u32;
        let h = hash_parts(parts.iter().map(|(_, i)| event.values[*i].as_str()));
        if let Some(d) = &mut distinct {
            d.add(h);
        }
        if second != starts_of {
            starts = window_starts(second);
            starts_of = second;
        }
        live[(h >> 58) as usize]
            .entry(h)
            .or_default()
            .add(second, &starts);
        if second >= next_sweep {
            *peak_live = (*peak_live).max(held(&live));
            if next_sweep > 0 {
                for shard in &mut live {
                    shard.retain(|h, b| {
                        let keep = u64::from(b.last) + QUIET_S > u64::from(second);
                        if !keep {
                            fold(*h, b);
                        }
                        keep
                    });
                    // A table does not shrink by itself: after a busy hour it would keep its
                    // peak's room.
                    if shard.capacity() > 4 * shard.len() + 1_024 {
                        shard.shrink_to_fit();
                    }
                }
            }
            next_sweep = second + SWEEP_S as u32;
        }
    })?;
    *peak_live = (*peak_live).max(held(&live));
    for (h, b) in live.iter().flatten() {
        fold(*h, b);
    }
    Ok(pass)
}

/// The candidates of one window and algorithm, as replayed in pass 3.
#[derive(Debug)]
struct Run {
    window: usize,
    algorithm: usize,
    limit: u64,
    rule: AnyRule,
    refused_requests: u64,
    refused: HashMap<u64, u64, BuildPrehashed>,
}

/// Suggests limits for the key of `limit` (its key parts, filled by `options.mapping`), from
/// the log `open` opens (called three times: it is read in three passes).
///
/// # Errors
/// As [`crate::replay_log`] before its first line; a share outside (0, 1).
pub fn suggest<R: BufRead>(
    open: &mut dyn FnMut() -> std::io::Result<R>,
    limit: &Limit,
    options: &LogOptions,
    suggest: &SuggestOptions,
) -> Result<Suggestion, ReplayError> {
    if !(suggest.refuse_share > 0.0 && suggest.refuse_share < 1.0) {
        return Err(ReplayError::Mapping(format!(
            "the share of keys to refuse must be between 0 and 1 (0.001 is 0.1 %), not {}",
            suggest.refuse_share
        )));
    }
    let parts = key_indices(limit, &options.mapping)?;
    let reopen = |open: &mut dyn FnMut() -> std::io::Result<R>| {
        open().map_err(|e| ReplayError::Mapping(format!("cannot read the log again: {e}")))
    };

    // Pass 1: the distribution of busiest periods.
    let mut histograms: Vec<BTreeMap<u32, u64>> = vec![BTreeMap::new(); N];
    let mut keys = 0_u64;
    let mut distinct = KeyCount::default();
    let mut peak_live = 0;
    let pass = busiest_pass(
        reopen(open)?,
        options,
        &parts,
        Some(&mut distinct),
        &mut peak_live,
        &mut |_, b| {
            keys += 1;
            for (h, m) in histograms.iter_mut().zip(b.max) {
                *h.entry(m[0]).or_default() += 1;
            }
        },
    )?;
    let span_s = pass.span_us.map_or(0, |(s, e)| (e - s) / 1_000_000 + 1);
    let windows: Vec<usize> = (0..N)
        .filter(|&i| i == 0 || WINDOWS[i].as_secs() <= span_s)
        .collect();
    let target_keys = (suggest.refuse_share * keys as f64).floor() as u64;
    let bases: Vec<u64> = histograms
        .iter()
        .map(|h| {
            // The smallest v with no more than `target_keys` keys above it.
            let mut above = keys;
            for (&v, &n) in h {
                above -= n;
                if above <= target_keys {
                    return u64::from(v).max(1);
                }
            }
            1
        })
        .collect();
    let mut algorithms = suggest.algorithms.clone();
    let covered = algorithms.contains(&limit.algorithm())
        || (limit.algorithm() == Algorithm::TokenBucket && algorithms.contains(&Algorithm::Gcra));
    if !covered {
        algorithms.push(limit.algorithm());
    }
    let mut runs: Vec<Run> = Vec::new();
    for &w in &windows {
        let mut values: Vec<u64> = FACTORS
            .iter()
            .map(|f| (bases[w] as f64 * f).ceil() as u64)
            .collect();
        values.dedup();
        for (a, algorithm) in algorithms.iter().enumerate() {
            for &v in &values {
                let quota = Quota::new(v, WINDOWS[w])?;
                runs.push(Run {
                    window: w,
                    algorithm: a,
                    limit: v,
                    rule: AnyRule::new(*algorithm, &quota),
                    refused_requests: 0,
                    refused: HashMap::default(),
                });
            }
        }
    }
    // Pass 2: the suspects.
    let mut suspects: HashMap<u64, Suspect, BuildPrehashed> = HashMap::default();
    busiest_pass(reopen(open)?, options, &parts, None, &mut 0, &mut |h, b| {
        if runs
            .iter()
            .any(|r| could_refuse(&b.max, b.total, r.window, algorithms[r.algorithm], r.limit))
        {
            let s = suspects.entry(h).or_default();
            for i in 0..N {
                for k in 0..3 {
                    s.max[i][k] = s.max[i][k].max(b.max[i][k]);
                }
            }
            s.total = s.total.saturating_add(b.total);
        }
    })?;

    // Pass 3: the candidates replayed for the suspects.
    let mut live: HashMap<u64, Live, BuildPrehashed> = HashMap::default();
    let mut names: HashMap<u64, Box<str>, BuildPrehashed> = HashMap::default();
    let mut suspect_requests = 0_u64;
    let mut next_sweep = 0_u64;
    each_decided(reopen(open)?, options, &mut |now, _, event| {
        let second = now / 1_000_000;
        if second >= next_sweep {
            live.retain(|_, l| l.last + STATE_QUIET_S > second);
            next_sweep = second + SWEEP_S;
        }
        let h = hash_parts(parts.iter().map(|(_, i)| event.values[*i].as_str()));
        let Some(s) = suspects.get(&h) else {
            return;
        };
        suspect_requests += 1;
        let l = live.entry(h).or_insert_with(|| Live {
            last: second,
            states: runs
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    could_refuse(&s.max, s.total, r.window, algorithms[r.algorithm], r.limit)
                })
                .map(|(c, r)| (c as u32, r.rule.empty_state()))
                .collect(),
        });
        l.last = second;
        for (c, state) in &mut l.states {
            let run = &mut runs[*c as usize];
            if run.rule.admits(state, now, 1).is_ok() {
                run.rule.charge(state, now, 1);
            } else {
                run.refused_requests += 1;
                *run.refused.entry(h).or_default() += 1;
                names
                    .entry(h)
                    .or_insert_with(|| key_text(&parts, &event.values).into());
            }
        }
    })?;

    // The results, per window and algorithm.
    let mut out: Vec<WindowSuggestion> = windows
        .iter()
        .map(|&w| WindowSuggestion {
            window: WINDOWS[w],
            percentiles: PERCENTILES
                .iter()
                .map(|&p| (p, percentile(&histograms[w], keys, p)))
                .collect(),
            base: bases[w],
            algorithms: algorithms
                .iter()
                .map(|a| AlgorithmCandidates {
                    algorithm: *a,
                    candidates: Vec::new(),
                    chosen: None,
                })
                .collect(),
        })
        .collect();
    for run in runs {
        let abusers = run
            .refused
            .values()
            .filter(|&&n| n > suggest.collateral_max)
            .count() as u64;
        let mut top: Vec<(u64, u64)> = run.refused.iter().map(|(h, n)| (*h, *n)).collect();
        top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| names[&a.0].cmp(&names[&b.0])));
        top.truncate(NAMED);
        let candidate = Candidate {
            limit: run.limit,
            refused_requests: run.refused_requests,
            abusers,
            collateral: run.refused.len() as u64 - abusers,
            top: top
                .into_iter()
                .map(|(h, n)| (names[&h].to_string(), n))
                .collect(),
        };
        let w = windows
            .iter()
            .position(|&w| w == run.window)
            .expect("a window replayed");
        out[w].algorithms[run.algorithm].candidates.push(candidate);
    }
    for w in &mut out {
        for a in &mut w.algorithms {
            a.chosen = a
                .candidates
                .iter()
                .position(|c| c.refused_keys() <= target_keys);
        }
    }
    Ok(Suggestion {
        limit: limit.name().to_owned(),
        key_parts: parts.iter().map(|(p, _)| p.to_string()).collect(),
        lines: pass.lines,
        decided: pass.decided,
        keys,
        distinct,
        refuse_share: suggest.refuse_share,
        target_keys,
        collateral_max: suggest.collateral_max,
        peak_live,
        suspects: suspects.len() as u64,
        suspect_requests,
        windows: out,
    })
}

/// The `p`-th percentile (nearest rank) of a histogram of `n` values.
fn percentile(h: &BTreeMap<u32, u64>, n: u64, p: f64) -> u64 {
    if n == 0 {
        return 0;
    }
    let rank = ((p / 100.0 * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0;
    for (&v, &c) in h {
        seen += c;
        if seen >= rank {
            return u64::from(v);
        }
    }
    0
}

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
        for w in &self.windows {
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
                    Some(c) => {
                        let c = &a.candidates[c];
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
                    None => {
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
                }
            }
        }
        out
    }
}

/// `limit` at each of `values` (its limit per period; a burst different from the limit is
/// scaled with it), named `<name>-at-<value>`, to replay side by side with it.
///
/// # Errors
/// [`ReplayError::Limit`] for a value the quota cannot take.
pub fn candidate_limits(limit: &Limit, values: &[u64]) -> Result<Vec<Limit>, ReplayError> {
    let quota = limit.quota();
    values
        .iter()
        .map(|&v| {
            let mut q = Quota::new(v, quota.period())?;
            if quota.burst() != quota.limit() {
                let burst = (quota.burst() as f64 * v as f64 / quota.limit() as f64).round();
                q = q.with_burst((burst as u64).max(1))?;
            }
            let suffix = format!("-at-{v}");
            let base: String = limit
                .name()
                .chars()
                .take(64 - suffix.len().min(64))
                .collect();
            let mut l = Limit::new(format!("{base}{suffix}"), limit.algorithm(), q)?;
            if let Some(parts) = limit.key_parts() {
                l = l.keyed_by(parts.iter().map(|p| &**p))?;
            }
            Ok(l.shadow(limit.is_shadow()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busiest_windows_are_clock_aligned() {
        let mut b = Busy::default();
        for s in [100_u32, 100, 100, 101, 109, 110] {
            b.add(s, &window_starts(s));
        }
        assert_eq!(b.max[0], [3, 4, 4], "100, then 100 and 101, then 99 to 101");
        assert_eq!(b.max[1], [5, 6, 6], "100..=109 is one 10 s window");
        assert_eq!(b.max[2], [6, 6, 6]);
        assert_eq!(b.total, 6);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let h: BTreeMap<u32, u64> = [(1, 98), (5, 1), (40, 1)].into_iter().collect();
        assert_eq!(percentile(&h, 100, 50.0), 1);
        assert_eq!(percentile(&h, 100, 99.0), 5);
        assert_eq!(percentile(&h, 100, 100.0), 40);
        assert_eq!(share_text(0.001), "0.1 %");
        assert_eq!(share_text(0.05), "5 %");
    }
}
