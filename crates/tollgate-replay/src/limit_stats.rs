//! What one limit did over a replay or a simulation: the counts, the series the charts draw,
//! the most refused keys and the waits refused clients were given.
//!
//! Memory is bounded by the keys and the log's time span (one pair of counters per second),
//! never by the number of lines.

use std::collections::HashMap;
use std::time::Duration;

use tollgate::{Decision, Limit};

use crate::key_count::{BuildPrehashed, KeyCount};

/// The `retry_after` buckets' upper bounds (the last bucket has none).
pub const RETRY_BUCKETS: &[(Duration, &str)] = &[
    (Duration::from_millis(100), "< 100 ms"),
    (Duration::from_secs(1), "100 ms – 1 s"),
    (Duration::from_secs(5), "1 – 5 s"),
    (Duration::from_secs(15), "5 – 15 s"),
    (Duration::from_secs(60), "15 s – 1 min"),
    (Duration::from_secs(300), "1 – 5 min"),
    (Duration::MAX, "≥ 5 min"),
];

/// How long a per-second series may grow (7 days: 4.8 MB per limit). A log spanning more, or
/// one line with a time far ahead (a corrupt timestamp), is still counted in full; only the
/// series stops there.
pub const MAX_SERIES_SECONDS: usize = 7 * 86_400;

/// One limit's results.
#[derive(Debug, Clone)]
pub struct LimitStats {
    /// The limit's name.
    pub name: String,
    /// Its algorithm's config name.
    pub algorithm: &'static str,
    /// Its quota, as a reader would write it (`100 per 1m, burst 100`).
    pub quota: String,
    /// Its quota's period.
    pub period: Duration,
    /// Its quota's limit (units per period).
    pub limit: u64,
    /// A shadow limit: its refusals are would-be refusals.
    pub shadow: bool,
    /// Whether the limit is keyed (a per-key limit: its quota bounds each key, not the total).
    pub keyed: bool,
    /// Distinct keys decided.
    pub keys_seen: KeyCount,
    /// Requests decided.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// The second `per_second` starts at (µs since the epoch; set at the end of a replay).
    pub start_us: u64,
    /// Per second from the first event's second: requests, admitted.
    pub per_second: Vec<[u32; 2]>,
    /// Refusals per `retry_after` bucket ([`RETRY_BUCKETS`]).
    pub retry_after: [u64; RETRY_BUCKETS.len()],
    denied_keys: HashMap<Box<str>, u64>,
    /// Per key (by [`crate::key_count::hash_parts`]), its admissions' times.
    admits: Option<HashMap<u64, Vec<u64>, BuildPrehashed>>,
}

impl LimitStats {
    /// Empty results for `limit`; with `track_admits`, every admission's time is kept too,
    /// per key (for [`LimitStats::max_in_any_period`]: simulations, not logs).
    pub fn new(limit: &Limit, track_admits: bool) -> LimitStats {
        let quota = limit.quota();
        let mut text = format!("{} per {}", quota.limit(), human(quota.period()));
        if quota.burst() != quota.limit() {
            text.push_str(&format!(", burst {}", quota.burst()));
        }
        LimitStats {
            name: limit.name().to_owned(),
            algorithm: limit.algorithm().name(),
            quota: text,
            period: quota.period(),
            limit: quota.limit(),
            shadow: limit.is_shadow(),
            keyed: limit.key_parts().is_some_and(|p| !p.is_empty()),
            keys_seen: KeyCount::default(),
            requests: 0,
            admitted: 0,
            start_us: 0,
            per_second: Vec::new(),
            retry_after: [0; RETRY_BUCKETS.len()],
            denied_keys: HashMap::new(),
            admits: track_admits.then(HashMap::default),
        }
    }

    /// Counts `decision`, made at `time_us`, `second` seconds after the start, for the key
    /// of hash `key_hash` ([`crate::key_count::hash_parts`]) shown as `key` (built only when
    /// refused).
    pub(crate) fn record(
        &mut self,
        second: usize,
        time_us: u64,
        decision: &Decision,
        key_hash: u64,
        key: impl FnOnce(&mut String),
        scratch: &mut String,
    ) {
        let mut slot = None;
        if second < MAX_SERIES_SECONDS {
            if self.per_second.len() <= second {
                self.per_second.resize(second + 1, [0, 0]);
            }
            let s = &mut self.per_second[second];
            s[0] = s[0].saturating_add(1);
            slot = Some(s);
        }
        self.requests += 1;
        if decision.is_allowed() {
            if let Some(s) = slot {
                s[1] = s[1].saturating_add(1);
            }
            self.admitted += 1;
            if let Some(admits) = &mut self.admits {
                admits.entry(key_hash).or_default().push(time_us);
            }
            return;
        }
        let wait = decision.retry_after().unwrap_or(Duration::ZERO);
        let bucket = RETRY_BUCKETS
            .iter()
            .position(|(bound, _)| wait < *bound)
            .unwrap_or(RETRY_BUCKETS.len() - 1);
        self.retry_after[bucket] += 1;
        scratch.clear();
        key(scratch);
        match self.denied_keys.get_mut(scratch.as_str()) {
            Some(n) => *n += 1,
            None => {
                self.denied_keys.insert(scratch.as_str().into(), 1);
            }
        }
    }

    /// Requests refused (would-be refusals for a shadow limit).
    pub fn denied(&self) -> u64 {
        self.requests - self.admitted
    }

    /// Refused ÷ decided (0 when nothing was decided).
    pub fn deny_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.denied() as f64 / self.requests as f64
        }
    }

    /// The `k` keys refused most, most first (ties by key).
    pub fn top_denied(&self, k: usize) -> Vec<(&str, u64)> {
        let mut all: Vec<(&str, u64)> = self
            .denied_keys
            .iter()
            .map(|(key, n)| (&**key, *n))
            .collect();
        all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all.truncate(k);
        all
    }

    /// Distinct keys refused at least once.
    pub fn denied_key_count(&self) -> usize {
        self.denied_keys.len()
    }

    /// Keys refused more than `collateral_max` times (abusers), and at most that often
    /// (collateral: ordinary clients caught by a burst, a page's assets loading at once).
    pub fn refused_split(&self, collateral_max: u64) -> (u64, u64) {
        let abusers = self
            .denied_keys
            .values()
            .filter(|&&n| n > collateral_max)
            .count() as u64;
        (abusers, self.denied_keys.len() as u64 - abusers)
    }

    /// Requests refused per second (the series charts draw beside requests and admitted).
    pub fn refused_per_second(&self) -> Vec<u64> {
        self.per_second
            .iter()
            .map(|[r, a]| u64::from(r - a))
            .collect()
    }

    /// Refusals per clock minute (`hh:mm:00` to `hh:mm:59`), from the minute of the first
    /// event's second, which is `into_minute` seconds into its minute: index `i` is the
    /// `i`-th clock minute from that one.
    pub fn denied_per_minute(&self, into_minute: usize) -> Vec<u64> {
        let mut minutes = vec![0_u64; (into_minute + self.per_second.len()).div_ceil(60)];
        for (s, [req, adm]) in self.per_second.iter().enumerate() {
            minutes[(into_minute + s) / 60] += u64::from(req - adm);
        }
        minutes
    }

    /// The most admissions of one key in any interval of one period (`[t, t + period)`),
    /// when admissions were tracked: what the limit let one client through, which is what
    /// its quota bounds (a per-key limit's total over many keys is no measure of it).
    pub fn max_in_any_period(&self) -> Option<u64> {
        let period = self.period.as_micros() as u64;
        let most = |admits: &[u64]| {
            let mut best = 0;
            let mut start = 0;
            for (end, &t) in admits.iter().enumerate() {
                while admits[start].saturating_add(period) <= t {
                    start += 1;
                }
                best = best.max(end + 1 - start);
            }
            best as u64
        };
        Some(
            self.admits
                .as_ref()?
                .values()
                .map(|a| most(a))
                .max()
                .unwrap_or(0),
        )
    }
}

/// `1m`, `1h`, `250ms`, `1.5s`: a period as configs write it.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        format!("{}µs", d.as_micros())
    } else if ms.is_multiple_of(86_400_000) {
        format!("{}d", ms / 86_400_000)
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Quota};

    fn decision(allowed: bool, retry_ms: u64) -> Decision {
        if allowed {
            Decision::allowed(2, 0, Duration::ZERO)
        } else {
            Decision::refused(2, 0, Duration::ZERO, Duration::from_millis(retry_ms))
        }
    }

    #[test]
    fn counts_series_keys_and_waits() {
        let limit = Limit::new(
            "l",
            Algorithm::FixedWindow,
            Quota::per_second(2).expect("q"),
        )
        .expect("limit");
        let mut s = LimitStats::new(&limit, true);
        let mut scratch = String::new();
        let key = |k: &'static str| move |out: &mut String| out.push_str(k);
        s.record(0, 0, &decision(true, 0), 1, key("a"), &mut scratch);
        s.record(0, 10, &decision(true, 0), 1, key("a"), &mut scratch);
        s.record(0, 20, &decision(false, 500), 1, key("a"), &mut scratch);
        s.record(
            2,
            2_000_000,
            &decision(false, 2_000),
            2,
            key("b"),
            &mut scratch,
        );
        s.record(
            2,
            2_000_001,
            &decision(false, 3_000),
            2,
            key("b"),
            &mut scratch,
        );
        s.record(2, 2_000_002, &decision(true, 0), 3, key("c"), &mut scratch);
        assert_eq!((s.requests, s.admitted, s.denied()), (6, 3, 3));
        assert_eq!(s.per_second, vec![[3, 2], [0, 0], [3, 1]]);
        assert_eq!(s.top_denied(1), vec![("b", 2)]);
        assert_eq!(s.top_denied(5), vec![("b", 2), ("a", 1)]);
        assert_eq!(s.retry_after[1], 1);
        assert_eq!(s.retry_after[2], 2);
        assert_eq!(s.denied_per_minute(0), vec![3]);
        // Seconds 0 and 2 of the first event's minute, 59 seconds in: two clock minutes.
        assert_eq!(s.denied_per_minute(59), vec![1, 2]);
        assert_eq!(s.denied_per_minute(57), vec![3]);
        assert_eq!(s.max_in_any_period(), Some(2));
        assert_eq!(s.quota, "2 per 1s");
    }

    /// The most admitted in one period is per key: two keys admitted 2 each in the same
    /// second are 2 for a limit of 2 per key (before: 4, "2.00× the limit").
    #[test]
    fn the_most_in_a_period_is_per_key() {
        let limit = Limit::new(
            "l",
            Algorithm::FixedWindow,
            Quota::per_second(2).expect("q"),
        )
        .expect("limit")
        .keyed_by(["user"])
        .expect("keyed");
        let mut s = LimitStats::new(&limit, true);
        let mut scratch = String::new();
        for (t, key) in [(0, 1), (1, 2), (2, 1), (3, 2)] {
            s.record(0, t, &decision(true, 0), key, |_| {}, &mut scratch);
        }
        assert_eq!(s.max_in_any_period(), Some(2));
    }
}
