//! Who is being limited: a bounded top-k of the most refused keys per limit, and each limit's
//! refusal ratio over the last minute.
//!
//! An operator paged at night asks "one abuser, or everyone?". Counting refusals per key
//! exactly would take memory per key, which an attacker controls; a label per key in
//! Prometheus would do the same to the metrics server. So each limit keeps a *space-saving*
//! sketch (Metwally et al.): `CAPACITY` counters; a key not held replaces the smallest counter
//! and inherits its count as its error. Every key refused more than `n / CAPACITY` times (of
//! `n` refusals counted) is held, and each held count overstates the truth by at most its
//! `error`, which is reported with it.
//!
//! Two spans: since the limiter was built, and the last five minutes (five one-minute
//! sketches, merged when asked: a key's count is the sum of its counts where held, and its
//! error adds, for each minute where it is not held, that minute's smallest count).
//!
//! Time comes from the limiter's clock (minutes since the epoch), never read here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Key;

/// Counters per sketch.
pub const TOP_CAPACITY: usize = 64;
/// One-minute sketches in the recent span.
const MINUTES: usize = 5;

/// A key among the most refused, with its count and how much that count may overstate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopKey {
    /// The key (its text, as stored: `<prefix>:<limit>:{<parts>}:<tag>`).
    pub key: Key,
    /// Refusals counted for it (the true count is between `count − error` and `count`).
    pub count: u64,
    /// The most `count` may overstate.
    pub error: u64,
}

/// Which refusals to rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// The last five minutes (the current one included).
    Recent,
    /// Since the limiter was built.
    SinceStart,
}

/// One limit's sketches and counts.
#[derive(Debug, Default)]
pub(crate) struct LimitActivity {
    /// Taken for refusals only.
    inner: Mutex<Activity>,
    /// Lock-free, as every check counts here.
    ratio: Ratio,
}

#[derive(Debug, Default)]
struct Activity {
    since_start: Sketch,
    /// `(minute, sketch)`, the current minute last.
    minutes: Vec<(u64, Sketch)>,
}

/// Decisions and refusals of the current and the previous minute. A check racing a change of
/// minute may be counted in the wrong one: it is a ratio for people, not a quota.
#[derive(Debug, Default)]
struct Ratio {
    minute: AtomicU64,
    /// `[decisions, refusals]`.
    current: [AtomicU64; 2],
    previous: [AtomicU64; 2],
}

impl Ratio {
    fn record(&self, refused: bool, minute: u64) {
        let seen = self.minute.load(Ordering::Relaxed);
        if seen != minute
            && self
                .minute
                .compare_exchange(seen, minute, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            for i in 0..2 {
                let moved = self.current[i].swap(0, Ordering::Relaxed);
                let kept = if seen + 1 == minute { moved } else { 0 };
                self.previous[i].store(kept, Ordering::Relaxed);
            }
        }
        self.current[0].fetch_add(1, Ordering::Relaxed);
        if refused {
            self.current[1].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The ratio over minute `q` and the one before it.
    fn at(&self, q: u64) -> Option<f64> {
        let m = self.minute.load(Ordering::Relaxed);
        let (mut total, mut refused) = (0, 0);
        if m == q || m + 1 == q {
            total += self.current[0].load(Ordering::Relaxed);
            refused += self.current[1].load(Ordering::Relaxed);
        }
        if m == q {
            // Moved there when minute `q` began: the minute before, or zeros.
            total += self.previous[0].load(Ordering::Relaxed);
            refused += self.previous[1].load(Ordering::Relaxed);
        }
        // Counts far below 2^53: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        (total > 0).then(|| refused as f64 / total as f64)
    }
}

impl LimitActivity {
    /// Counts one decision of a check at `minute` (µs / 60 s), refused or not.
    pub(crate) fn record(&self, key: &Key, refused: bool, minute: u64) {
        self.ratio.record(refused, minute);
        if !refused {
            return;
        }
        let mut a = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        a.since_start.add(key);
        if a.minutes.last().is_none_or(|(m, _)| *m != minute) {
            a.minutes.push((minute, Sketch::default()));
        }
        a.minutes.retain(|(m, _)| m + MINUTES as u64 > minute);
        if let Some((_, sketch)) = a.minutes.last_mut() {
            sketch.add(key);
        }
    }

    /// The `k` most refused keys over `span`, most refused first, as of `minute`.
    pub(crate) fn top(&self, k: usize, span: Span, minute: u64) -> Vec<TopKey> {
        let a = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<TopKey> = match span {
            Span::SinceStart => a.since_start.entries(),
            Span::Recent => merge(
                a.minutes
                    .iter()
                    .filter(|(m, _)| m + MINUTES as u64 > minute)
                    .map(|(_, s)| s),
            ),
        };
        out.sort_by(|x, y| {
            y.count
                .cmp(&x.count)
                .then_with(|| x.key.as_str().cmp(y.key.as_str()))
        });
        out.truncate(k);
        out
    }

    /// Refusals ÷ decisions over the previous and the current minute, as of `minute`
    /// (`None` without a decision in that time).
    pub(crate) fn deny_ratio(&self, minute: u64) -> Option<f64> {
        self.ratio.at(minute)
    }
}

/// A space-saving sketch of at most [`TOP_CAPACITY`] counters.
#[derive(Debug, Default)]
struct Sketch {
    counters: HashMap<Key, (u64, u64)>,
}

impl Sketch {
    fn add(&mut self, key: &Key) {
        if let Some((count, _)) = self.counters.get_mut(key) {
            *count += 1;
            return;
        }
        if self.counters.len() < TOP_CAPACITY {
            self.counters.insert(key.clone(), (1, 0));
            return;
        }
        let smallest = self
            .counters
            .iter()
            .min_by_key(|(_, (count, _))| *count)
            .map(|(k, (count, _))| (k.clone(), *count));
        if let Some((evicted, min)) = smallest {
            self.counters.remove(&evicted);
            self.counters.insert(key.clone(), (min + 1, min));
        }
    }

    /// The smallest count held when full (what an absent key may have had), else 0.
    fn floor(&self) -> u64 {
        if self.counters.len() < TOP_CAPACITY {
            return 0;
        }
        self.counters.values().map(|(c, _)| *c).min().unwrap_or(0)
    }

    fn entries(&self) -> Vec<TopKey> {
        self.counters
            .iter()
            .map(|(key, &(count, error))| TopKey {
                key: key.clone(),
                count,
                error,
            })
            .collect()
    }
}

/// Sums sketches: a key's count where held, plus each other sketch's floor, counted in both
/// its count and its error.
fn merge<'a>(sketches: impl Iterator<Item = &'a Sketch> + Clone) -> Vec<TopKey> {
    let mut keys: HashMap<&Key, ()> = HashMap::new();
    for s in sketches.clone() {
        for k in s.counters.keys() {
            keys.insert(k, ());
        }
    }
    keys.into_keys()
        .map(|key| {
            let (mut count, mut error) = (0, 0);
            for s in sketches.clone() {
                match s.counters.get(key) {
                    Some(&(c, e)) => {
                        count += c;
                        error += e;
                    }
                    // Not held that minute: it may have had up to the floor there. Both
                    // count and error take it, so that the count still only overstates
                    // (true count in [count − error, count]).
                    None => {
                        let floor = s.floor();
                        count += floor;
                        error += floor;
                    }
                }
            }
            TopKey {
                key: key.clone(),
                count,
                error,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Limit, Namespace, Quota};

    fn key(user: &str) -> Key {
        let limit =
            Limit::new("t", Algorithm::Gcra, Quota::per_second(1).expect("valid")).expect("valid");
        Key::new(&Namespace::default(), &limit, &[("user", user)])
    }

    /// A heavy hitter among a flood of one-off keys is found, with its exact count or an
    /// error bound that covers the truth; memory stays at the capacity.
    #[test]
    fn finds_the_heavy_hitter_in_a_flood() {
        let activity = LimitActivity::default();
        let abuser = key("abuser");
        for i in 0..10_000u64 {
            activity.record(&key(&format!("bot-{i}")), true, 7);
            if i % 10 == 0 {
                activity.record(&abuser, true, 7);
            }
        }
        for span in [Span::Recent, Span::SinceStart] {
            let top = activity.top(3, span, 7);
            assert_eq!(top[0].key, abuser, "{span:?}: {top:?}");
            assert!(
                top[0].count >= 1_000 && top[0].count - top[0].error <= 1_000,
                "{top:?}"
            );
        }
        let a = activity.inner.lock().expect("lock");
        assert!(a.since_start.counters.len() <= TOP_CAPACITY);
    }

    /// The recent span forgets what is older than five minutes; since-start does not.
    #[test]
    fn recent_span_slides() {
        let activity = LimitActivity::default();
        for _ in 0..5 {
            activity.record(&key("old"), true, 100);
        }
        activity.record(&key("new"), true, 104);
        assert_eq!(activity.top(5, Span::Recent, 104).len(), 2);
        activity.record(&key("new"), true, 105);
        let recent = activity.top(5, Span::Recent, 105);
        assert_eq!(recent.len(), 1, "{recent:?}");
        assert_eq!((recent[0].count, recent[0].error), (2, 0));
        assert_eq!(activity.top(5, Span::SinceStart, 105)[0].count, 5);
    }

    /// A key held in one minute and pushed out in the next (a flood of new keys there) is
    /// never undercounted across the boundary: its count may overstate, within its error,
    /// never understate (issue #33: a key refused 1006 times was listed as 1000 ± 20).
    #[test]
    fn merged_minutes_never_undercount() {
        let activity = LimitActivity::default();
        let hot = key("hot");
        let mut true_count = 0;
        for _ in 0..1_000 {
            activity.record(&hot, true, 20);
            true_count += 1;
        }
        // Next minute: the hot key a few times early, then pushed out by a flood of others
        // each refused several times.
        for _ in 0..6 {
            activity.record(&hot, true, 21);
            true_count += 1;
        }
        for round in 0..20 {
            for i in 0..(TOP_CAPACITY as u64 + 10) {
                activity.record(&key(&format!("bot-{round}-{i}")), true, 21);
                activity.record(&key(&format!("bot-{round}-{i}")), true, 21);
            }
        }
        let top = activity.top(1, Span::Recent, 21);
        assert_eq!(top[0].key, hot, "{top:?}");
        assert!(
            top[0].count >= true_count && top[0].count - top[0].error <= true_count,
            "true count {true_count}: {top:?}"
        );
    }

    /// The refusal ratio covers the previous and the current minute.
    #[test]
    fn deny_ratio_over_the_last_minute() {
        let activity = LimitActivity::default();
        assert_eq!(activity.deny_ratio(10), None);
        for i in 0..10 {
            activity.record(&key("a"), i < 5, 10);
        }
        assert_eq!(activity.deny_ratio(10), Some(0.5));
        for _ in 0..10 {
            activity.record(&key("a"), false, 11);
        }
        assert_eq!(activity.deny_ratio(11), Some(0.25));
        assert_eq!(activity.deny_ratio(13), None, "nothing in the last minute");
    }
}
