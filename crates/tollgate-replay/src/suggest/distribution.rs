//! Pass 1: the distribution of the keys' busiest periods, per window length, and what comes
//! of it — the window lengths the log is long enough for, the value only the chosen share
//! of keys exceeded (where the candidates start), and the percentiles shown.

use std::collections::BTreeMap;
use std::io::BufRead;

use super::busiest::busiest_pass;
use super::{N, WINDOWS};
use crate::key_count::KeyCount;
use crate::replay_error::ReplayError;
use crate::replay_log::{LogOptions, Pass};

/// What pass 1 found: per window length, how many keys had each busiest single window.
pub(super) struct Distribution {
    /// Per window length: busiest window's count → keys.
    pub(super) histograms: Vec<BTreeMap<u32, u64>>,
    /// Keys in the distribution (a key quiet for an hour and back counts twice).
    pub(super) keys: u64,
    /// Distinct keys.
    pub(super) distinct: KeyCount,
    /// The most keys held at once.
    pub(super) peak_live: u64,
    /// The pass's lines, decided lines and span.
    pub(super) pass: Pass,
}

impl Distribution {
    /// Pass 1 over `reader`: every key's busiest single window, per window length.
    pub(super) fn read<R: BufRead>(
        reader: R,
        options: &LogOptions,
        parts: &[(Box<str>, usize)],
    ) -> Result<Distribution, ReplayError> {
        let mut histograms: Vec<BTreeMap<u32, u64>> = vec![BTreeMap::new(); N];
        let mut keys = 0_u64;
        let mut distinct = KeyCount::default();
        let mut peak_live = 0;
        let pass = busiest_pass(
            reader,
            options,
            parts,
            Some(&mut distinct),
            &mut peak_live,
            &mut |_, b| {
                keys += 1;
                for (h, m) in histograms.iter_mut().zip(b.max) {
                    *h.entry(m[0]).or_default() += 1;
                }
            },
        )?;
        Ok(Distribution {
            histograms,
            keys,
            distinct,
            peak_live,
            pass,
        })
    }

    /// The window lengths measured: those no longer than the log (and always the first).
    pub(super) fn windows(&self) -> Vec<usize> {
        let span_s = self
            .pass
            .span_us
            .map_or(0, |(s, e)| (e - s) / 1_000_000 + 1);
        (0..N)
            .filter(|&i| i == 0 || WINDOWS[i].as_secs() <= span_s)
            .collect()
    }

    /// Per window length, the smallest value with no more than `target_keys` keys above it.
    pub(super) fn bases(&self, target_keys: u64) -> Vec<u64> {
        self.histograms
            .iter()
            .map(|h| {
                // The smallest v with no more than `target_keys` keys above it.
                let mut above = self.keys;
                for (&v, &n) in h {
                    above -= n;
                    if above <= target_keys {
                        return u64::from(v).max(1);
                    }
                }
                1
            })
            .collect()
    }
}

/// The `p`-th percentile (nearest rank) of a histogram of `n` values.
pub(super) fn percentile(h: &BTreeMap<u32, u64>, n: u64, p: f64) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let h: BTreeMap<u32, u64> = [(1, 98), (5, 1), (40, 1)].into_iter().collect();
        assert_eq!(percentile(&h, 100, 50.0), 1);
        assert_eq!(percentile(&h, 100, 99.0), 5);
        assert_eq!(percentile(&h, 100, 100.0), 40);
        assert_eq!(crate::suggest::share_text(0.001), "0.1 %");
        assert_eq!(crate::suggest::share_text(0.05), "5 %");
    }
}
