//! [`suggest`]: the three passes over the log, and the candidates replayed in the third —
//! the busiest periods' distribution (pass 1) sets the candidates, the suspects (pass 2)
//! are the keys some candidate could refuse, and the candidates decide only those (pass 3),
//! so that memory follows the live keys and every count is a replay's.

use std::collections::HashMap;
use std::io::BufRead;

use tollgate::rules::{AnyRule, AnyState};
use tollgate::{Algorithm, Limit, Quota};

use super::busiest::{Suspect, busiest_pass, could_refuse};
use super::distribution::{Distribution, percentile};
use super::tombstones::{Table, Tombstones};
use super::{
    AlgorithmCandidates, Candidate, FACTORS, N, NAMED, PERCENTILES, STATE_QUIET_S, SWEEP_S,
    SuggestOptions, Suggestion, WINDOWS, WindowSuggestion,
};
use crate::key_count::{BuildPrehashed, hash_parts};
use crate::key_mapping::{key_indices, key_text};
use crate::replay_error::ReplayError;
use crate::replay_log::{LogOptions, each_decided};

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

/// A live suspect in pass 3: its states, one per candidate that could refuse it.
#[derive(Debug)]
struct Live {
    last: u64,
    states: Vec<(u32, AnyState)>,
}

/// The suspects, by key hash: keys some candidate could refuse.
type Suspects = HashMap<u64, Suspect, BuildPrehashed>;
/// The names of the keys refused, by key hash.
type Names = HashMap<u64, Box<str>, BuildPrehashed>;

/// Suggests limits for the key of `limit` (its key parts, filled by `options.mapping`), from
/// the log `open` opens (called three times: it is read in three passes).
///
/// # Errors
/// As [`crate::replay_log()`] before its first line; a share outside (0, 1).
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

    // Pass 1: the distribution of busiest periods.
    let d = Distribution::read(reopen(open)?, options, &parts)?;
    let windows = d.windows();
    let target_keys = (suggest.refuse_share * d.keys as f64).floor() as u64;
    let bases = d.bases(target_keys);
    let algorithms = algorithms(suggest, limit);
    let mut runs = runs(&windows, &bases, &algorithms)?;
    // Pass 2: the suspects.
    let suspects = suspects(reopen(open)?, options, &parts, &runs, &algorithms)?;
    // Pass 3: the candidates replayed for the suspects.
    let (suspect_requests, names) = replay_suspects(
        reopen(open)?,
        options,
        &parts,
        &suspects,
        &mut runs,
        &algorithms,
    )?;

    // The results, per window and algorithm.
    let mut out = window_suggestions(&windows, &d, &bases, &algorithms);
    place_candidates(&mut out, &windows, runs, &names, suggest.collateral_max);
    choose(&mut out, target_keys);
    Ok(Suggestion {
        limit: limit.name().to_owned(),
        key_parts: parts.iter().map(|(p, _)| p.to_string()).collect(),
        lines: d.pass.lines,
        decided: d.pass.decided,
        keys: d.keys,
        distinct: d.distinct,
        refuse_share: suggest.refuse_share,
        target_keys,
        collateral_max: suggest.collateral_max,
        peak_live: d.peak_live,
        suspects: suspects.len() as u64,
        suspect_requests,
        windows: out,
    })
}

/// The log opened again, or why it cannot be.
fn reopen<R>(open: &mut dyn FnMut() -> std::io::Result<R>) -> Result<R, ReplayError> {
    open().map_err(|e| ReplayError::Mapping(format!("cannot read the log again: {e}")))
}

/// The algorithms to suggest for: those asked, and the limit's own unless covered (a token
/// bucket is covered by GCRA, which gives its answers).
fn algorithms(suggest: &SuggestOptions, limit: &Limit) -> Vec<Algorithm> {
    let mut algorithms = suggest.algorithms.clone();
    let covered = algorithms.contains(&limit.algorithm())
        || (limit.algorithm() == Algorithm::TokenBucket && algorithms.contains(&Algorithm::Gcra));
    if !covered {
        algorithms.push(limit.algorithm());
    }
    algorithms
}

/// Every candidate to replay: per window length and algorithm, [`FACTORS`] × the window's
/// base (repeated values once).
fn runs(
    windows: &[usize],
    bases: &[u64],
    algorithms: &[Algorithm],
) -> Result<Vec<Run>, ReplayError> {
    let mut runs: Vec<Run> = Vec::new();
    for &w in windows {
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
    Ok(runs)
}

/// Pass 2: the keys some run could refuse, with their busiest windows over all their
/// spells.
fn suspects<R: BufRead>(
    reader: R,
    options: &LogOptions,
    parts: &[(Box<str>, usize)],
    runs: &[Run],
    algorithms: &[Algorithm],
) -> Result<Suspects, ReplayError> {
    let mut suspects: Suspects = HashMap::default();
    busiest_pass(reader, options, parts, None, &mut 0, &mut |h, b| {
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
    Ok(suspects)
}

/// Pass 3: each suspect's requests decided by every run that could refuse it; returns the
/// suspects' requests and the names of the keys refused.
fn replay_suspects<R: BufRead>(
    reader: R,
    options: &LogOptions,
    parts: &[(Box<str>, usize)],
    suspects: &Suspects,
    runs: &mut [Run],
    algorithms: &[Algorithm],
) -> Result<(u64, Names), ReplayError> {
    let mut live: Table<Live> = Table::default();
    let mut tombstones = Tombstones::default();
    let mut names: Names = HashMap::default();
    let mut suspect_requests = 0_u64;
    let mut next_sweep = 0_u64;
    each_decided(reader, options, &mut |now, _, event| {
        let second = now / 1_000_000;
        if second >= next_sweep {
            tombstones.sweep(&mut live, |_, l| l.last + STATE_QUIET_S > second);
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
                    .or_insert_with(|| key_text(parts, &event.values).into());
            }
        }
    })?;
    Ok((suspect_requests, names))
}

/// Per window length measured: its percentiles and base, and per algorithm no candidate yet.
fn window_suggestions(
    windows: &[usize],
    d: &Distribution,
    bases: &[u64],
    algorithms: &[Algorithm],
) -> Vec<WindowSuggestion> {
    windows
        .iter()
        .map(|&w| WindowSuggestion {
            window: WINDOWS[w],
            percentiles: PERCENTILES
                .iter()
                .map(|&p| (p, percentile(&d.histograms[w], d.keys, p)))
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
        .collect()
}

/// Each run, as a candidate, under its window and algorithm (in the runs' order).
fn place_candidates(
    out: &mut [WindowSuggestion],
    windows: &[usize],
    runs: Vec<Run>,
    names: &Names,
    collateral_max: u64,
) {
    for run in runs {
        let w = windows
            .iter()
            .position(|&w| w == run.window)
            .expect("a window replayed");
        let algorithm = run.algorithm;
        out[w].algorithms[algorithm]
            .candidates
            .push(candidate(run, names, collateral_max));
    }
}

/// A run's result: whom it refused (abusers and collateral) and its most refused keys.
fn candidate(run: Run, names: &Names, collateral_max: u64) -> Candidate {
    let abusers = run
        .refused
        .values()
        .filter(|&&n| n > collateral_max)
        .count() as u64;
    let mut top: Vec<(u64, u64)> = run.refused.iter().map(|(h, n)| (*h, *n)).collect();
    top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| names[&a.0].cmp(&names[&b.0])));
    top.truncate(NAMED);
    Candidate {
        limit: run.limit,
        refused_requests: run.refused_requests,
        abusers,
        collateral: run.refused.len() as u64 - abusers,
        top: top
            .into_iter()
            .map(|(h, n)| (names[&h].to_string(), n))
            .collect(),
    }
}

/// The suggestion per window and algorithm: its smallest candidate refusing no more than
/// `target_keys` keys.
fn choose(out: &mut [WindowSuggestion], target_keys: u64) {
    for w in out {
        for a in &mut w.algorithms {
            a.chosen = a
                .candidates
                .iter()
                .position(|c| c.refused_keys() <= target_keys);
        }
    }
}
