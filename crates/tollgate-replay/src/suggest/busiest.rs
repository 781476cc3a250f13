//! Each key's busiest periods (passes 1 and 2), in 136 bytes per live key: per window
//! length the current clock-aligned window's count and the two before it, and the busiest
//! one, two and three adjacent windows. The busiest windows bound what any algorithm could
//! refuse the key ([`could_refuse`]), which is what lets pass 3 decide only the suspects.

use std::io::BufRead;

use tollgate::Algorithm;

use super::tombstones::{Table, Tombstones};
use super::{N, QUIET_S, SWEEP_S, WINDOWS};
use crate::key_count::{KeyCount, hash_parts};
use crate::replay_error::ReplayError;
use crate::replay_log::{LogOptions, Pass, each_decided};

/// Per live key, in passes 1 and 2: 128 bytes, 136 with its hash (in one of 64 tables).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Busy {
    /// The second of its last request, counted from a whole hour before the log's start
    /// (so that every window length's alignment is the epoch's).
    last: u32,
    /// Per window length: the current aligned window's count and the two before it.
    cur: [[u32; 3]; N],
    /// Per window length: the busiest one, two and three adjacent aligned windows.
    pub(super) max: [[u32; 3]; N],
    /// Its requests.
    pub(super) total: u32,
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
pub(super) struct Suspect {
    /// Per window length: the busiest one, two and three adjacent aligned windows.
    pub(super) max: [[u32; 3]; N],
    /// Its requests.
    pub(super) total: u32,
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
pub(super) fn could_refuse(
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

/// One pass of busiest periods: `fold` gets every key's, once it is quiet or at the end.
pub(super) fn busiest_pass<R: BufRead>(
    reader: R,
    options: &LogOptions,
    parts: &[(Box<str>, usize)],
    distinct: Option<&mut KeyCount>,
    peak_live: &mut u64,
    fold: &mut dyn FnMut(u64, &Busy),
) -> Result<Pass, ReplayError> {
    // Sharded, so that a shard growing copies 1/64 of the keys, not all of them (one table
    // of ten million would hold its old and new tables at once). By bits 32–37 of the hash:
    // the hash map places a key by the low bits and tells keys apart in a probe by the top
    // seven, so a shard chosen by either would leave its keys all alike there (by the top
    // six, a probe matched half the keys it passed).
    const SHARDS: usize = 64;
    let mut live: Vec<(Table<Busy>, Tombstones)> =
        (0..SHARDS).map(|_| Default::default()).collect();
    let mut next_sweep = 0_u32;
    let mut base = None;
    let (mut starts, mut starts_of) = (window_starts(0), 0);
    let mut distinct = distinct;
    let held =
        |live: &[(Table<Busy>, Tombstones)]| live.iter().map(|(m, _)| m.len() as u64).sum::<u64>();
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
        live[((h >> 32) % SHARDS as u64) as usize]
            .0
            .entry(h)
            .or_default()
            .add(second, &starts);
        if second >= next_sweep {
            *peak_live = (*peak_live).max(held(&live));
            if next_sweep > 0 {
                for (shard, tombstones) in &mut live {
                    tombstones.sweep(shard, |h, b| {
                        let keep = u64::from(b.last) + QUIET_S > u64::from(second);
                        if !keep {
                            fold(*h, b);
                        }
                        keep
                    });
                }
            }
            next_sweep = second + SWEEP_S as u32;
        }
    })?;
    *peak_live = (*peak_live).max(held(&live));
    for (h, b) in live.iter().flat_map(|(m, _)| m) {
        fold(*h, b);
    }
    Ok(pass)
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
}
