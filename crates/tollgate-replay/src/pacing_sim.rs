//! `tollgate simulate pacing`: workers of several instances in front of an upstream that
//! allows `limit` calls per period, each worker sending its calls one after the other. Three
//! ways side by side, on one shared store:
//! - **reserve**: each call takes the next free slot of the limit's schedule
//!   (`Limiter::reserve`) and is sent when it begins — one store call per call sent;
//! - **retry**: each call is checked; a refused one sleeps its exact `retry_after` and asks
//!   again — every worker refused at once wakes at once;
//! - **retry-jitter**: the same, each wait stretched by a random 0–100 %.
//!
//! The upstream's limit has a burst of 1: its promise is at most `limit` calls in any window
//! of its period (a larger burst would let `burst` calls through at once, on top of the
//! rate). Reported per way: the calls the upstream saw per second (the chart), the most in any
//! window of the period, the idle slots while callers waited (the schedule's slots between the
//! first and the last call that carried none), and store calls per call sent. Virtual time:
//! the same report every run. With `--redis URL` the three ways run again on that Redis (the
//! same virtual time, given to the scripts as the client's clock; a fresh key prefix per
//! run), so the figures of the Lua scripts stand next to the memory store's.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tollgate::{
    Algorithm, BoxStore, Decision, FakeClock, Limit, Limiter, MemoryStore, Namespace, Outcome,
    Quota, Timestamp,
};

use crate::limit_stats::LimitStats;
use crate::replay_error::ReplayError;
use crate::report::{Expectation, Report};
use crate::sim_options::{SimOptions, T0_US};
use crate::xorshift::XorShift;

/// Instances the workers are spread over (they share the store: one limiter stands for it).
const INSTANCES: usize = 4;
/// Calls each worker sends.
const CALLS: u32 = 3;

/// How a worker gets its calls through.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Reserve,
    Retry { jitter: bool },
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Reserve => "reserve",
            Way::Retry { jitter: false } => "retry",
            Way::Retry { jitter: true } => "retry-jitter",
        }
    }
}

/// What one way did.
struct Run {
    stats: LimitStats,
    store_calls: u64,
    sent: u64,
    idle_slots: u64,
    max_in_period: u64,
}

/// Runs the three ways with the first limit's rate (burst 1) and `options.workers` workers per
/// instance.
pub(crate) async fn pacing(options: &SimOptions, report: &mut Report) -> Result<(), ReplayError> {
    let first = &options.limits[0];
    let quota = Quota::new(first.quota().limit(), first.quota().period())?.with_burst(1)?;
    let workers = INSTANCES * options.workers.max(1);
    let ways = [
        Way::Reserve,
        Way::Retry { jitter: false },
        Way::Retry { jitter: true },
    ];
    let mut runs = Vec::new();
    for way in ways {
        let on = On::Memory(MemoryStore::builder().sweep_interval(None));
        runs.push(run(way, quota, workers, options.seed, on).await?);
    }
    let mut on_redis = Vec::new();
    if let Some(url) = &options.redis {
        for way in ways {
            on_redis.push(run(way, quota, workers, options.seed, On::Redis(url)).await?);
        }
    }
    let t = Duration::from_micros(quota.emission_interval_micros());
    report.notes.push(format!(
        "{INSTANCES} instances × {} workers, {CALLS} calls each, against an upstream allowing \
         {} per {:?} (burst 1: one call per {t:?}); one store shared by every instance",
        options.workers.max(1),
        quota.limit(),
        quota.period(),
    ));
    for r in runs.iter().chain(&on_redis) {
        report.notes.push(format!(
            "{}: {} calls sent, at most {} in any {:?}, {} idle slots ({:.1} % of the rate used), \
             {:.2} store calls per call sent",
            r.stats.name,
            r.sent,
            r.max_in_period,
            quota.period(),
            r.idle_slots,
            100.0 * r.sent as f64 / (r.sent + r.idle_slots).max(1) as f64,
            r.store_calls as f64 / r.sent.max(1) as f64,
        ));
    }
    expectations(&runs, quota.limit(), "", report);
    if !on_redis.is_empty() {
        expectations(&on_redis, quota.limit(), " on Redis", report);
        runs.extend(on_redis);
    }
    report.lines = runs.iter().map(|r| r.store_calls).sum();
    report.span_us = runs
        .iter()
        .map(|r| {
            (
                r.stats.start_us,
                r.stats.start_us + 1_000_000 * r.stats.per_second.len() as u64,
            )
        })
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    report.limits.extend(runs.into_iter().map(|r| r.stats));
    Ok(())
}

/// The three figures of the reserve way against the retrying ways of the same store
/// (`on`: "" or " on Redis").
fn expectations(runs: &[Run], limit: u64, on: &str, report: &mut Report) {
    let reserve = &runs[0];
    let per_sent = |r: &Run| r.store_calls as f64 / r.sent.max(1) as f64;
    let used = reserve.sent as f64 / (reserve.sent + reserve.idle_slots).max(1) as f64;
    report.expectations.push(Expectation {
        expected: format!("reserve{on}: the upstream never sees more than {limit} in any period"),
        measured: format!("at most {} in any period", reserve.max_in_period),
        met: reserve.max_in_period <= limit,
    });
    report.expectations.push(Expectation {
        expected: format!("reserve{on}: at least 98 % of the rate used while callers wait"),
        measured: format!("{:.1} % ({} idle slots)", 100.0 * used, reserve.idle_slots),
        met: used >= 0.98,
    });
    report.expectations.push(Expectation {
        expected: format!(
            "reserve{on}: at most 1.05 store calls per call sent, fewer than retrying"
        ),
        measured: format!(
            "{:.2} (retry {:.2}, retry-jitter {:.2})",
            per_sent(reserve),
            per_sent(&runs[1]),
            per_sent(&runs[2])
        ),
        met: per_sent(reserve) <= 1.05 && runs[1..].iter().all(|r| per_sent(r) > per_sent(reserve)),
    });
}

/// Where a way runs: a fresh memory store, or a Redis under a fresh key prefix.
enum On<'a> {
    Memory(tollgate::MemoryStoreBuilder),
    Redis(&'a str),
}

/// One way: `workers` workers from T0, on a fresh store, until every call is sent (or 50
/// periods of virtual time).
async fn run(
    way: Way,
    quota: Quota,
    workers: usize,
    seed: u64,
    on: On<'_>,
) -> Result<Run, ReplayError> {
    let clock = FakeClock::new(Timestamp::from_micros(T0_US));
    let (name, store, namespace) = store_for(way, on, &clock).await?;
    let limit = Limit::new(&name, Algorithm::Gcra, quota)?;
    let mut stats = LimitStats::new(&limit, true);
    stats.start_us = T0_US;
    // Every worker asks for the same key: the upstream's one limit.
    stats.keys_seen.add(worker_key());
    let limiter = Limiter::builder(store)
        .namespace(namespace)
        .clock(clock.clone())
        .limit(limit)
        .build()?;
    let mut rng = XorShift(seed.max(1));
    let mut queue: BinaryHeap<Reverse<(u64, usize)>> =
        (0..workers).map(|w| Reverse((T0_US, w))).collect();
    let mut left = vec![CALLS; workers];
    let mut sends = Vec::new();
    let mut store_calls = 0;
    let end = T0_US + 50 * quota.period_micros();
    let none: [(&str, &str); 0] = [];
    let mut scratch = String::new();
    while let Some(Reverse((t, w))) = queue.pop() {
        if t > end {
            break;
        }
        clock.set(Timestamp::from_micros(t));
        store_calls += 1;
        let sent_at = match way {
            Way::Reserve => {
                let r = limiter
                    // The longest a reservation may wait (an hour).
                    .reserve(
                        &name,
                        &none,
                        1,
                        Duration::from_micros(tollgate::rules::DEBT_HORIZON_US),
                    )
                    .await?;
                if r.store_error().is_some() {
                    return Err(ReplayError::Redis(format!("{name}: the store failed")));
                }
                r.wait().map(|wait| t + wait.as_micros() as u64)
            }
            Way::Retry { jitter } => {
                let v = limiter.check(&name, &none).await?;
                if v.store_error().is_some() {
                    return Err(ReplayError::Redis(format!("{name}: the store failed")));
                }
                match v.outcome() {
                    Outcome::Allowed => Some(t),
                    _ => {
                        let decision = v.decision();
                        let second = ((t - T0_US) / 1_000_000) as usize;
                        stats.record(
                            second,
                            t,
                            &decision,
                            worker_key(),
                            |s| s.push_str("worker"),
                            &mut scratch,
                        );
                        let mut wait =
                            decision.retry_after().unwrap_or_default().as_micros() as u64;
                        if jitter {
                            wait += (rng.next_f64() * wait as f64) as u64;
                        }
                        queue.push(Reverse((t + wait.max(1), w)));
                        None
                    }
                }
            }
        };
        if let Some(at) = sent_at {
            sends.push(at);
            left[w] -= 1;
            if left[w] > 0 {
                queue.push(Reverse((at + 1_000, w)));
            }
        }
    }
    Ok(tally(quota, stats, sends, store_calls))
}

/// The limit's name for `way`, its store on `on` (on the virtual `clock` in memory; Redis
/// keeps its own) and the namespace of its keys (a fresh prefix on Redis).
async fn store_for(
    way: Way,
    on: On<'_>,
    clock: &FakeClock,
) -> Result<(String, BoxStore, Namespace), ReplayError> {
    Ok(match on {
        On::Memory(builder) => (
            way.name().to_owned(),
            BoxStore::new(builder.clock(clock.clone()).build()),
            Namespace::default(),
        ),
        On::Redis(url) => {
            let store = tollgate_redis::RedisStore::builder(url)
                .timeout(Duration::from_secs(5))
                .build()
                .await
                .map_err(|e| ReplayError::Redis(e.to_string()))?;
            let prefix = format!("tollgate-pacing-{}-{}", std::process::id(), unique());
            (
                format!("{}-on-redis", way.name()),
                BoxStore::new(store),
                Namespace::new(prefix).map_err(ReplayError::Limit)?,
            )
        }
    })
}

/// A way's figures: the upstream's calls (`sends`, virtual µs) counted into `stats`, the most
/// in any period, and the slots of the schedule left idle between the first and the last.
fn tally(quota: Quota, mut stats: LimitStats, mut sends: Vec<u64>, store_calls: u64) -> Run {
    sends.sort_unstable();
    let allowed = Decision::allowed(quota.limit(), 0, Duration::ZERO);
    let mut scratch = String::new();
    for &at in &sends {
        let second = ((at - T0_US) / 1_000_000) as usize;
        stats.record(second, at, &allowed, worker_key(), |_| {}, &mut scratch);
    }
    let t = quota.emission_interval_micros();
    let slots = match (sends.first(), sends.last()) {
        (Some(a), Some(b)) => (b - a) / t + 1,
        _ => 0,
    };
    Run {
        max_in_period: stats.max_in_any_period().unwrap_or(0),
        stats,
        store_calls,
        sent: sends.len() as u64,
        idle_slots: slots.saturating_sub(sends.len() as u64),
    }
}

/// The hash of the one key every worker asks for (the upstream's one limit).
fn worker_key() -> u64 {
    crate::key_count::hash_parts(["worker"])
}

/// A number no other run of this process used: runs on one Redis never share keys.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
