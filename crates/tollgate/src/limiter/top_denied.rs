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
//! Watching must cost nothing (issue #33): every refusal counts here, so the refusal path
//! shares no lock between cores. A limit's counts are split into shards, one per core: a
//! thread counts in its home shard (its refusal ratio with atomics, its sketches under the
//! shard's own mutex, taken with `try_lock`; when another thread holds it, the next free
//! shard, which becomes the thread's home). A shard's sketches allocate nothing once full (the
//! minutes are a ring of reused sketches) and take a new key in O(log capacity)
//! (`top_denied/sketch.rs`). Reading merges every shard's sketches as it merges minutes, by the same
//! rule: a key absent from a sketch takes that sketch's floor in its count and its error. The
//! bound is kept: each sketch's floor is at most its own refusals ÷ `CAPACITY`, so the error
//! of a merged count stays within `n / CAPACITY` of all `n` refusals merged, and a key refused
//! more than that is held in at least one shard, so listed. Memory: shards × six sketches ×
//! `CAPACITY` counters per limit, at most, and none for a shard that has counted no refusal.
//!
//! Time comes from the limiter's clock (minutes since the epoch), never read here.

use std::cell::Cell;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};

use super::decision_counters::DecisionCounters;
use crate::Key;
use crate::limit::key::BuildKeyHasher;

mod sketch;

use sketch::Sketch;

/// Counters per sketch.
pub const TOP_CAPACITY: usize = 64;
/// One-minute sketches in the recent span.
const MINUTES: usize = 5;
/// Most shards per limit, whatever the number of cores.
const MAX_SHARDS: usize = 16;

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

impl TopKey {
    /// Refusals it certainly had: `count − error`, what it is ranked by. A key held in a
    /// sketch was refused at least once since it came in, so this is never 0 for a listed
    /// key; after a flood of one-off keys, one refused once shows a count of the flood's
    /// floor plus one, and this 1.
    #[must_use]
    pub fn guaranteed(&self) -> u64 {
        self.count.saturating_sub(self.error)
    }

    /// Whether its count says more about the other keys than about it: at least half of it
    /// may be overstatement (`error ≥ count − error`). Such a key may have been refused as
    /// few as [`TopKey::guaranteed`] times (a one-off key at the end of a flood is listed
    /// with a count near the heaviest's): no reason, alone, to block it. A count with no
    /// error is never uncertain.
    #[must_use]
    pub fn uncertain(&self) -> bool {
        self.error > 0 && self.error >= self.guaranteed()
    }
}

/// Which refusals to rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// The last five minutes (the current one included).
    Recent,
    /// Since the limiter was built.
    SinceStart,
}

/// One limit's sketches and counts, in shards: see the module docs.
#[derive(Debug)]
pub(crate) struct LimitActivity {
    shards: Box<[Shard]>,
    /// `tollgate_decisions_total` for this limit (counted beside, not in the shards).
    pub(super) decisions: DecisionCounters,
}

impl Default for LimitActivity {
    fn default() -> Self {
        LimitActivity::with_shards(shard_count())
    }
}

/// One shard: its own counts and sketches, on cache lines of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    /// Lock-free, as every check counts here.
    ratio: Ratio,
    /// Taken for refusals only, by the threads whose home this shard is (and, when it is
    /// free, by a thread whose own shard is taken), and by readers. Made by the shard's first
    /// refusal: six sketches are 5 KB, and a limit that never refuses (most of a config of
    /// thousands, such as an imported YAML directory) held that much per shard for nothing
    /// (10 KB a limit on 2 cores, 80 KB on 16: an audit's 32 000 imported limits took 1 GB).
    sketches: Mutex<Option<Box<Sketches>>>,
}

#[derive(Debug, Default)]
struct Sketches {
    since_start: Sketch,
    /// A ring of one-minute sketches: minute `m` in place `m % MINUTES`, reused (cleared, its
    /// memory kept) when a later minute comes to the same place.
    minutes: [MinuteSketch; MINUTES],
}

#[derive(Debug, Default)]
struct MinuteSketch {
    minute: u64,
    sketch: Sketch,
}

impl Sketches {
    fn add(&mut self, key: &Key, minute: u64) {
        self.since_start.add(key);
        // In range: the remainder is below `MINUTES`.
        #[allow(clippy::cast_possible_truncation)]
        let place = &mut self.minutes[(minute % MINUTES as u64) as usize];
        if place.minute != minute {
            if place.minute > minute {
                // A check that raced past five minutes of others: out of the recent span.
                return;
            }
            place.minute = minute;
            place.sketch.clear();
        }
        place.sketch.add(key);
    }
}

/// Shards per limit: one per core, at most [`MAX_SHARDS`].
fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, NonZeroUsize::get)
            .clamp(1, MAX_SHARDS)
    })
}

/// Homes handed out to threads, in turn.
static NEXT_HOME: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's home shard (modulo a limit's shards); `usize::MAX` until first used.
    static HOME: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's home shard, one of `0..shards`.
fn home(shards: usize) -> usize {
    HOME.with(|home| {
        let mut h = home.get();
        if h == usize::MAX {
            h = NEXT_HOME.fetch_add(1, Ordering::Relaxed);
            home.set(h);
        }
        h % shards
    })
}

/// Decisions and refusals of the current and the previous minute. A check racing a change of
/// minute may be counted in the wrong one: it is a ratio for people, not a quota.
///
/// Each count is one word, decisions in its low half and refusals in its high half, so that a
/// check costs one atomic add (a shard would need 2^32 decisions in a minute, 70 million a
/// second on one core, to carry into the refusals).
#[derive(Debug, Default)]
struct Ratio {
    minute: AtomicU64,
    current: AtomicU64,
    previous: AtomicU64,
}

/// One refusal, in a [`Ratio`] word.
const REFUSAL: u64 = 1 << 32;

impl Ratio {
    fn record(&self, refused: bool, minute: u64) {
        let seen = self.minute.load(Ordering::Relaxed);
        if seen != minute
            && self
                .minute
                .compare_exchange(seen, minute, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let moved = self.current.swap(0, Ordering::Relaxed);
            let kept = if seen + 1 == minute { moved } else { 0 };
            self.previous.store(kept, Ordering::Relaxed);
        }
        self.current
            .fetch_add(1 + u64::from(refused) * REFUSAL, Ordering::Relaxed);
    }

    /// `(decisions, refusals)` over minute `q` and the one before it.
    fn counts(&self, q: u64) -> (u64, u64) {
        let unpack = |word: u64| (word & (REFUSAL - 1), word >> 32);
        let m = self.minute.load(Ordering::Relaxed);
        let (mut total, mut refused) = (0, 0);
        if m == q || m + 1 == q {
            let (t, r) = unpack(self.current.load(Ordering::Relaxed));
            total += t;
            refused += r;
        }
        if m == q {
            // Moved there when minute `q` began: the minute before, or zeros.
            let (t, r) = unpack(self.previous.load(Ordering::Relaxed));
            total += t;
            refused += r;
        }
        (total, refused)
    }
}

impl LimitActivity {
    fn with_shards(shards: usize) -> Self {
        LimitActivity {
            shards: (0..shards.max(1)).map(|_| Shard::default()).collect(),
            decisions: DecisionCounters::default(),
        }
    }

    /// Counts one decision of a check at `minute` (µs / 60 s), refused or not.
    pub(crate) fn record(&self, key: &Key, refused: bool, minute: u64) {
        self.record_from(home(self.shards.len()), key, refused, minute);
    }

    /// [`LimitActivity::record`] by a thread whose home is shard `home`.
    fn record_from(&self, home: usize, key: &Key, refused: bool, minute: u64) {
        self.shards[home].ratio.record(refused, minute);
        if refused {
            self.lock_near(home)
                .get_or_insert_with(Box::default)
                .add(key, minute);
        }
    }

    /// The sketches of shard `home` if free, else of the next free one (which becomes the
    /// calling thread's home, so that threads sharing a home part), else of `home`, waiting.
    fn lock_near(&self, home: usize) -> MutexGuard<'_, Option<Box<Sketches>>> {
        let n = self.shards.len();
        let mut s = home;
        for _ in 0..n {
            match self.shards[s].sketches.try_lock() {
                Ok(guard) => {
                    if s != home {
                        HOME.with(|h| h.set(s));
                    }
                    return guard;
                }
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
            s += 1;
            if s == n {
                s = 0;
            }
        }
        self.shards[home]
            .sketches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The `k` most refused keys over `span`, as of `minute`: ranked by the refusals each
    /// certainly had ([`TopKey::guaranteed`]), then by count, then by key text. Ranked by
    /// count, a key refused once at the end of a flood (its count the floor it inherited,
    /// plus one) tied with or passed keys refused hundreds of times, and the tie went to the
    /// key whose text sorts first: a caller choosing such values (`%…`) chose which key
    /// headed the list, which operators are told to block upstream.
    pub(crate) fn top(&self, k: usize, span: Span, minute: u64) -> Vec<TopKey> {
        let mut merged = Merge::default();
        for shard in &self.shards {
            let sketches = shard
                .sketches
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(sketches) = sketches.as_deref() else {
                continue;
            };
            match span {
                Span::SinceStart => merged.add(&sketches.since_start),
                Span::Recent => {
                    for m in &sketches.minutes {
                        if m.minute + MINUTES as u64 > minute {
                            merged.add(&m.sketch);
                        }
                    }
                }
            }
        }
        let mut out = merged.finish();
        out.sort_by(|x, y| {
            y.guaranteed()
                .cmp(&x.guaranteed())
                .then_with(|| y.count.cmp(&x.count))
                .then_with(|| x.key.as_str().cmp(y.key.as_str()))
        });
        out.truncate(k);
        out
    }

    /// Refusals ÷ decisions over the previous and the current minute, as of `minute`
    /// (`None` without a decision in that time).
    pub(crate) fn deny_ratio(&self, minute: u64) -> Option<f64> {
        let (total, refused) = self
            .shards
            .iter()
            .map(|s| s.ratio.counts(minute))
            .fold((0, 0), |(t, r), (dt, dr)| (t + dt, r + dr));
        // Counts far below 2^53: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        (total > 0).then(|| refused as f64 / total as f64)
    }
}

/// Sums sketches (shards, minutes): a key's count where held, plus each other sketch's
/// floor, counted in both its count and its error, so that the count still only overstates
/// (true count in [count − error, count]). The error stays within `n / TOP_CAPACITY` for `n`
/// refusals counted by the sketches summed, as each floor is within its own sketch's share.
#[derive(Default)]
struct Merge {
    /// Every summed sketch's floor.
    floors: u64,
    /// Per key: the counts and errors where held, and the floors of the sketches holding it.
    held: HashMap<Key, (u64, u64, u64), BuildKeyHasher>,
}

impl Merge {
    fn add(&mut self, sketch: &Sketch) {
        let floor = sketch.floor();
        self.floors += floor;
        for (key, count, error) in sketch.entries() {
            let held = self.held.entry(key.clone()).or_default();
            held.0 += count;
            held.1 += error;
            held.2 += floor;
        }
    }

    fn finish(self) -> Vec<TopKey> {
        let floors = self.floors;
        self.held
            .into_iter()
            .map(|(key, (count, error, own_floors))| {
                // Not held in a sketch: it may have had up to that sketch's floor there.
                let elsewhere = floors - own_floors;
                TopKey {
                    key,
                    count: count + elsewhere,
                    error: error + elsewhere,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Barrier;

    use proptest::prelude::*;

    use super::*;
    use crate::{Algorithm, Limit, Namespace, Quota};

    fn key(user: &str) -> Key {
        let limit =
            Limit::new("t", Algorithm::Gcra, Quota::per_second(1).expect("valid")).expect("valid");
        Key::new(&Namespace::default(), &limit, &[("user", user)])
    }

    /// A shard holds no sketch until it counts a refusal: a limit that never refuses costs
    /// its shards' ratios alone (a few cache lines), not six sketches each (5 KB).
    #[test]
    fn sketches_are_made_by_a_first_refusal() {
        assert!(
            std::mem::size_of::<Shard>() <= 256,
            "{} bytes a shard",
            std::mem::size_of::<Shard>()
        );
        let activity = LimitActivity::with_shards(4);
        let key = key("u");
        for _ in 0..10 {
            activity.record_from(1, &key, false, 7);
        }
        let made = |a: &LimitActivity| {
            a.shards
                .iter()
                .filter(|s| s.sketches.lock().expect("lock").is_some())
                .count()
        };
        assert_eq!(made(&activity), 0, "admissions make no sketch");
        assert!(activity.top(3, Span::Recent, 7).is_empty());
        activity.record_from(1, &key, true, 7);
        assert_eq!(made(&activity), 1, "a refusal makes its shard's");
        assert_eq!(activity.top(3, Span::Recent, 7)[0].count, 1);
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
        for shard in &activity.shards {
            let sketches = shard.sketches.lock().expect("lock");
            if let Some(sketches) = sketches.as_deref() {
                assert!(sketches.since_start.len() <= TOP_CAPACITY);
            }
        }
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

    /// Ranked by the guaranteed count (count − error), then the count: a key refused once
    /// at the end of a flood inherits the flood's floor (here 99, so its count is 100, the
    /// same as a key refused 100 times) and no longer heads the list, whatever its text
    /// sorts as (it did: `%…` listed first as ×22164 ±22163). It is marked uncertain; the
    /// key refused 100 times, counted exactly, is not.
    #[test]
    fn ranks_by_guaranteed_count() {
        let activity = LimitActivity::with_shards(1);
        let real = key("zz-real");
        for _ in 0..100 {
            activity.record(&real, true, 7);
        }
        // 63 counters of one-off keys, raised one at a time to 99 or 100: 6299 keys.
        for i in 0..6_299 {
            activity.record(&key(&format!("bot-{i}")), true, 7);
        }
        let once = key("%00");
        activity.record(&once, true, 7);
        for span in [Span::Recent, Span::SinceStart] {
            let top = activity.top(TOP_CAPACITY, span, 7);
            assert_eq!(
                (&top[0].key, top[0].count, top[0].error),
                (&real, 100, 0),
                "{span:?}: {:?}",
                &top[..3]
            );
            assert!(!top[0].uncertain());
            let listed = top
                .iter()
                .find(|t| t.key == once)
                .expect("the last key is held");
            assert_eq!((listed.count, listed.error), (100, 99), "{span:?}");
            assert_eq!(listed.guaranteed(), 1);
            assert!(listed.uncertain(), "{listed:?}");
            assert!(
                top.windows(2)
                    .all(|w| (w[0].guaranteed(), w[0].count) >= (w[1].guaranteed(), w[1].count)),
                "{span:?}: {top:?}"
            );
        }
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

    /// Checks every listed key of `top` against the exact counts `truth` (of `n` refusals in
    /// the span): true count in [count − error, count], error within n / capacity; and every
    /// key refused more than n / capacity times is listed.
    fn assert_within_bound(top: &[TopKey], truth: &HashMap<Key, u64>, n: u64, what: &str) {
        for t in top {
            let exact = truth.get(&t.key).copied().unwrap_or(0);
            assert!(
                t.count >= exact && t.count - t.error <= exact,
                "{what}: true count {exact}: {t:?}"
            );
            assert!(
                t.error * TOP_CAPACITY as u64 <= n,
                "{what}: error of {n}: {t:?}"
            );
        }
        for (key, &exact) in truth {
            if exact * TOP_CAPACITY as u64 > n {
                assert!(
                    top.iter().any(|t| t.key == *key),
                    "{what}: {key:?} refused {exact} of {n} times is not listed"
                );
            }
        }
    }

    /// Several threads refusing at once, each in its home shard or the next free one: the
    /// merged counts of both spans never undercount and stay within the bound, the heavy
    /// hitters come first, and a shard holds at most the capacity.
    #[test]
    fn concurrent_shards_never_undercount() {
        const THREADS: usize = 4;
        const PER_THREAD: u64 = 20_000;
        let activity = LimitActivity::with_shards(THREADS);
        let keys: Vec<Key> = ["hot-a", "hot-b"]
            .iter()
            .map(|k| key(k))
            .chain((0..THREADS * 8_000).map(|i| key(&format!("bot-{i}"))))
            .collect();
        // Thread `t`'s i-th refusal: (key, minute); the same function replays it below.
        let step = |t: usize, i: u64| -> (usize, u64) {
            let k = if i.is_multiple_of(4) {
                0
            } else if i % 10 == 1 {
                1
            } else {
                2 + t * 8_000 + usize::try_from(i / 3).expect("small") % 8_000
            };
            (k, 40 + u64::from(i >= PER_THREAD / 2))
        };
        let start = Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (activity, keys, start) = (&activity, &keys, &start);
                scope.spawn(move || {
                    start.wait();
                    for i in 0..PER_THREAD {
                        let (k, minute) = step(t, i);
                        activity.record(&keys[k], true, minute);
                        if i.is_multiple_of(5) {
                            activity.record(&keys[k], false, minute);
                        }
                    }
                });
            }
        });
        let mut truth: HashMap<Key, u64> = HashMap::new();
        for t in 0..THREADS {
            for i in 0..PER_THREAD {
                *truth.entry(keys[step(t, i).0].clone()).or_default() += 1;
            }
        }
        let n = THREADS as u64 * PER_THREAD;
        for span in [Span::Recent, Span::SinceStart] {
            let top = activity.top(usize::MAX, span, 41);
            assert_within_bound(&top, &truth, n, &format!("{span:?}"));
            assert_eq!((&top[0].key, &top[1].key), (&keys[0], &keys[1]), "{top:?}");
        }
        for shard in &activity.shards {
            let sketches = shard.sketches.lock().expect("lock");
            if let Some(sketches) = sketches.as_deref() {
                assert!(sketches.since_start.len() <= TOP_CAPACITY);
            }
        }
        let ratio = activity.deny_ratio(41).expect("checks counted");
        assert!(
            ratio > 0.8 && ratio < 0.9,
            "5 refusals in 6 decisions: {ratio}"
        );
    }

    /// Every shard's decisions count in the ratio.
    #[test]
    fn deny_ratio_sums_the_shards() {
        let activity = LimitActivity::with_shards(3);
        for i in 0..12 {
            activity.record_from(i % 3, &key("a"), i < 3, 10);
        }
        assert_eq!(activity.deny_ratio(10), Some(0.25));
        activity.record_from(1, &key("a"), true, 11);
        assert_eq!(activity.deny_ratio(11), Some(4.0 / 13.0));
    }

    proptest! {
        /// Any stream of refusals spread over any shards and minutes, against exact counts:
        /// both spans' merged counts are within their error of the truth, the error within
        /// n / capacity, and every key refused more than that is listed.
        #[test]
        fn sharded_merge_keeps_the_bound(
            stream in proptest::collection::vec((0usize..440, 0usize..4, 0u16..1_000), 1..4_000)
        ) {
            let activity = LimitActivity::with_shards(4);
            let keys: Vec<Key> = (0..400).map(|i| key(&format!("k{i}"))).collect();
            let mut minute = 1_000;
            let mut log = Vec::with_capacity(stream.len());
            for &(k, shard, tick) in &stream {
                // A tenth of the refusals on four heavy hitters, the rest spread thin.
                let k = if k < 40 { k % 4 } else { k - 40 };
                // Now and then the next minute, or one after a gap.
                minute += match tick { 0 => 1, 1 => 3, _ => 0 };
                activity.record_from(shard, &keys[k], true, minute);
                log.push((k, minute));
            }
            let (mut recent, mut since_start) = (HashMap::new(), HashMap::new());
            for &(k, m) in &log {
                *since_start.entry(keys[k].clone()).or_default() += 1;
                if m + MINUTES as u64 > minute {
                    *recent.entry(keys[k].clone()).or_default() += 1;
                }
            }
            for (span, truth) in [(Span::Recent, recent), (Span::SinceStart, since_start)] {
                let top = activity.top(usize::MAX, span, minute);
                assert_within_bound(&top, &truth, truth.values().sum(), &format!("{span:?}"));
            }
        }
    }
}
