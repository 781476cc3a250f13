//! `tollgate simulate`: synthetic traffic on a virtual clock, every limit side by side, and
//! the outcome each scenario should have stated next to what was measured.
//!
//! Each limit is driven on its own (a [`Replayer`] per limit), so a scenario whose clients
//! react to refusals (the retry storm) reacts to that limit's answers. Time is virtual: a
//! simulation of hours runs in milliseconds and gives the same report every time (the
//! jitter's random numbers come from a fixed seed). Only `--redis` runs are real: real
//! concurrency against a real `redis-server`, where the claim is about Redis itself.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Decision, Limit, Limiter, Namespace, Outcome};

use crate::key_mapping::KeyMapping;
use crate::limit_stats::LimitStats;
use crate::naive_fixed_window;
use crate::replay_error::ReplayError;
use crate::replayer::Replayer;
use crate::report::{Expectation, Report};
use crate::scenario::Scenario;
use crate::xorshift::XorShift;

pub use crate::sim_options::{SimOptions, T0_US};

/// Every algorithm, in the order reports list them.
pub const ALGORITHMS: [Algorithm; 5] = Algorithm::ALL;

/// The most requests one run of a scenario generates (per limit): the requests are made
/// before they are decided, so their number is memory (`--rate 1e9`, `--limit 60000000`
/// asked for gigabytes and aborted). Past it, the scenario is refused, naming the options
/// that set it.
pub const MAX_EVENTS: u64 = 2_000_000;

/// Refuses a run of `scenario` that would generate `events` requests, more than
/// [`MAX_EVENTS`]; `options` are those that set the number.
fn check_events(
    scenario: Scenario,
    events: u128,
    options: &'static str,
) -> Result<(), ReplayError> {
    if events > u128::from(MAX_EVENTS) {
        return Err(ReplayError::TooManyEvents {
            scenario,
            events,
            options,
        });
    }
    Ok(())
}

/// Refuses a `--rate` that is no rate: 0, negative, NaN or infinite (each was taken as one
/// request per microsecond, and reported as "at -1.0/s").
fn check_rate(rate: Option<f64>) -> Result<(), ReplayError> {
    match rate {
        Some(r) if !(r.is_finite() && r > 0.0) => Err(ReplayError::BadOption {
            option: "--rate",
            value: r.to_string(),
            reason: "requests per second must be a finite number above 0".into(),
        }),
        _ => Ok(()),
    }
}

/// Runs `scenario`.
///
/// # Errors
/// [`ReplayError::NoLimits`]; [`ReplayError::BadOption`] for a rate that is not above 0;
/// [`ReplayError::TooManyEvents`] for a run of more than [`MAX_EVENTS`] requests;
/// [`ReplayError::Redis`] when `immortal-key` has no `--redis`, or Redis fails.
pub async fn simulate(scenario: Scenario, options: &SimOptions) -> Result<Report, ReplayError> {
    if options.limits.is_empty() && scenario != Scenario::ImmortalKey {
        return Err(ReplayError::NoLimits);
    }
    check_rate(options.rate)?;
    let workers = options.workers.max(1) as u128;
    match scenario {
        Scenario::RetryStorm => check_events(scenario, 3 * workers, "--workers")?,
        Scenario::Pacing => check_events(scenario, 12 * workers, "--workers")?,
        _ => {}
    }
    let mut report = Report {
        title: format!("simulate {scenario}"),
        ..Report::default()
    };
    match scenario {
        Scenario::Steady => steady(options, &mut report)?,
        Scenario::BurstAtEdge => burst_at_edge(options, &mut report)?,
        Scenario::Bots => bots(options, &mut report)?,
        Scenario::RetryStorm => retry_storm(options, &mut report)?,
        Scenario::Pacing => crate::pacing_sim::pacing(options, &mut report).await?,
        Scenario::Concurrent => {
            concurrent(options, &mut report)?;
            if let Some(url) = &options.redis {
                concurrent_on_redis(url, options, &mut report).await?;
            }
        }
        Scenario::ImmortalKey => {
            let url = options.redis.as_deref().ok_or_else(|| {
                ReplayError::Redis(
                    "immortal-key writes to a real Redis: give one with --redis URL \
                     (a scratch server: it writes one key without expiry, then deletes it)"
                        .into(),
                )
            })?;
            naive_fixed_window::immortal_key(url, &mut report).await?;
        }
    }
    Ok(report)
}

/// One [`Replayer`] per limit, every key part filled with the client's name.
fn replayers(limits: &[Limit]) -> Result<Vec<(Replayer, usize)>, ReplayError> {
    limits
        .iter()
        .map(|limit| {
            let parts = limit.key_parts().unwrap_or_default();
            let specs: Vec<String> = parts.iter().map(|p| format!("{p}=$client")).collect();
            let mapping = KeyMapping::parse(&specs).map_err(ReplayError::Mapping)?;
            Ok((
                Replayer::new(vec![limit.clone()], &mapping, true)?,
                parts.len(),
            ))
        })
        .collect()
}

/// Decides the same events (time, client: an index into `clients`), sorted by time, for
/// every limit; `seen(i, client, decision)` is told each decision of `limits[i]`.
fn run_events(
    limits: &[Limit],
    events: &[(u64, u32)],
    clients: &[String],
    report: &mut Report,
    seen: &mut dyn FnMut(usize, u32, &Decision),
) -> Result<(), ReplayError> {
    for (i, (mut replayer, n)) in replayers(limits)?.into_iter().enumerate() {
        let mut values = vec![String::new(); n];
        for &(t, client) in events {
            for v in &mut values {
                v.clone_from(&clients[client as usize]);
            }
            let decision = replayer.step(t, &values)[0];
            seen(i, client, &decision);
        }
        finish(replayer, report);
    }
    report.lines = events.len() as u64;
    Ok(())
}

/// One client's name, for the scenarios of one client.
fn one(name: &str) -> [String; 1] {
    [name.to_owned()]
}

fn finish(replayer: Replayer, report: &mut Report) {
    let span = replayer.start_us().map(|s| (s, replayer.now_us()));
    report.span_us = match (report.span_us, span) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    };
    report.limits.extend(replayer.into_stats());
}

fn period_us(limit: &Limit) -> u64 {
    limit.quota().period_micros()
}

fn steady(options: &SimOptions, report: &mut Report) -> Result<(), ReplayError> {
    let first = &options.limits[0];
    let rate = options.rate.unwrap_or_else(|| {
        1.5 * first.quota().limit() as f64 / first.quota().period().as_secs_f64()
    });
    let span = period_us(first).saturating_mul(u64::from(options.periods));
    let gap = (1_000_000.0 / rate).max(1.0);
    let n = span as f64 / gap;
    check_events(
        Scenario::Steady,
        n as u128,
        "--rate or --periods (the default rate is 1.5× --limit)",
    )?;
    let n = n as u64;
    let events: Vec<(u64, u32)> = (0..n)
        .map(|i| (T0_US + (i as f64 * gap) as u64, 0))
        .collect();
    run_events(
        &options.limits,
        &events,
        &one("c"),
        report,
        &mut |_, _, _| {},
    )?;
    for (l, limit) in report.limits.iter().zip(&options.limits) {
        let expected = (l.limit as f64 * span as f64 / l.period.as_micros() as f64).min(n as f64);
        // The most any exact algorithm admits in the span: its rate × the time, plus what it
        // holds at the start (its burst; a fixed window's limit, for the window the span
        // starts in).
        let most = expected + limit.capacity() as f64;
        report.expectations.push(Expectation {
            expected: format!(
                "{}: at {rate:.1}/s for {} s, about {:.0} admitted (its rate × the time), at most \
                 {:.0} (plus its burst of {})",
                l.name,
                span / 1_000_000,
                expected,
                most,
                limit.capacity()
            ),
            measured: format!("{} admitted of {}", l.admitted, l.requests),
            met: (l.admitted as f64) <= most && (l.admitted as f64) >= expected * 0.9,
        });
    }
    Ok(())
}

fn burst_at_edge(options: &SimOptions, report: &mut Report) -> Result<(), ReplayError> {
    for limit in &options.limits {
        let period = period_us(limit);
        let n = limit.quota().limit();
        // The first window boundary after T0 + one period (windows are aligned to the epoch).
        let edge = (T0_US + period) / period * period + period;
        let tenth = (period / 10).max(1);
        check_events(Scenario::BurstAtEdge, 2 * u128::from(n), "--limit")?;
        let mut events = Vec::with_capacity(2 * n as usize);
        let at = |i: u64| (u128::from(i) * u128::from(tenth) / u128::from(n)) as u64;
        for i in 0..n {
            events.push((edge - tenth + at(i), 0));
        }
        for i in 0..n {
            events.push((edge + at(i), 0));
        }
        run_events(
            std::slice::from_ref(limit),
            &events,
            &one("c"),
            report,
            &mut |_, _, _| {},
        )?;
        if !report.marks.iter().any(|m| m.at_us == edge) {
            report.marks.push(crate::chart::Mark {
                at_us: edge,
                label: format!("window edge {}", &crate::utc::utc(edge)[11..19]),
            });
        }
    }
    report.lines = report.limits.iter().map(|l| l.requests).sum();
    for l in &report.limits {
        let max = l.max_in_any_period().unwrap_or(0);
        let ratio = max as f64 / l.limit as f64;
        let (expected, met) = match l.algorithm {
            "fixed_window" => (
                "about 2× the limit in one period across the edge".to_owned(),
                ratio >= 1.9,
            ),
            "sliding_log" | "sliding_window" => (
                "never more than the limit in any period (≤ 1×)".to_owned(),
                max <= l.limit,
            ),
            _ => (
                "the burst, then only what refills during the two bursts (a fifth of a \
                 period): at most 1.2×"
                    .to_owned(),
                max * 5 <= l.limit * 6,
            ),
        };
        report.expectations.push(Expectation {
            expected: format!("{}: {expected}", l.name),
            measured: format!("{max} admitted in one period ({ratio:.2}×)"),
            met,
        });
    }
    Ok(())
}

/// Bots and users in the `bots` scenario.
const BOTS: u32 = 20;
const USERS: u32 = 100;

fn bots(options: &SimOptions, report: &mut Report) -> Result<(), ReplayError> {
    // Clients `0..BOTS` are the bots, the rest the users.
    let clients: Vec<String> = (0..BOTS)
        .map(|c| format!("bot-{c}"))
        .chain((0..USERS).map(|c| format!("user-{c}")))
        .collect();
    let mut outcomes = Vec::new();
    for limit in &options.limits {
        let period = period_us(limit);
        let n = limit.quota().limit();
        let span = period.saturating_mul(u64::from(options.periods));
        // 20 bots at 10× the limit, 100 users at half of it, evenly spaced, offsets apart.
        let classes = [
            (0, BOTS, n.saturating_mul(10)),
            (BOTS, USERS, n.div_ceil(2)),
        ];
        let total: u128 = classes
            .iter()
            .map(|&(_, count, per_period)| {
                let gap = (period / per_period).max(1);
                u128::from(count) * (u128::from(span / gap) + 1)
            })
            .sum();
        check_events(Scenario::Bots, total, "--limit or --periods")?;
        let mut events = Vec::new();
        for (first, count, per_period) in classes {
            let gap = (period / per_period).max(1);
            for c in 0..count {
                let mut t = T0_US + u64::from(c) * 7_919 % gap;
                while t < T0_US + span {
                    events.push((t, first + c));
                    t += gap;
                }
            }
        }
        events.sort_unstable();
        // Who was refused: by client, not by key text (an unkeyed limit has one key for all).
        let mut refusals = vec![0_u64; clients.len()];
        run_events(
            std::slice::from_ref(limit),
            &events,
            &clients,
            report,
            &mut |_, client, decision| {
                if !decision.is_allowed() {
                    refusals[client as usize] += 1;
                }
            },
        )?;
        outcomes.push(refusals);
    }
    report.lines = report.limits.iter().map(|l| l.requests).sum();
    for ((l, limit), refusals) in report.limits.iter().zip(&options.limits).zip(outcomes) {
        let (bots, users) = refusals.split_at(BOTS as usize);
        let bots_refused = bots.iter().filter(|&&n| n > 0).count();
        let users_refused = users.iter().filter(|&&n| n > 0).count();
        let user_refusals: u64 = users.iter().sum();
        let expectation = if l.keyed {
            Expectation {
                expected: format!("{}: the {BOTS} bots refused, no regular user", l.name),
                measured: format!(
                    "{bots_refused} of {BOTS} bots refused, {users_refused} users \
                     ({user_refusals} refusals of users)"
                ),
                met: bots_refused == BOTS as usize && user_refusals == 0,
            }
        } else {
            // One quota for every client: it cannot tell a bot from a user. What it should
            // do is hold the total to its quota (at most its burst plus one period's rate in
            // any period), refusing users along with the bots.
            let max = l.max_in_any_period().unwrap_or(0);
            let bound = limit.capacity().saturating_add(l.limit);
            Expectation {
                expected: format!(
                    "{}: unkeyed, one quota for all {} clients: it cannot tell bots from \
                     users, so it holds the total to at most {bound} in any period (its \
                     burst plus one period's rate) and refuses bots and users alike",
                    l.name,
                    BOTS + USERS
                ),
                measured: format!(
                    "{max} admitted in one period; {bots_refused} of {BOTS} bots and \
                     {users_refused} of {USERS} users refused"
                ),
                met: max <= bound && bots_refused > 0 && users_refused > 0,
            }
        };
        report.expectations.push(expectation);
    }
    Ok(())
}

fn retry_storm(options: &SimOptions, report: &mut Report) -> Result<(), ReplayError> {
    let clients = options.workers.max(1);
    for limit in &options.limits {
        for jitter in [false, true] {
            let name = if jitter {
                format!("{}-jitter", limit.name())
            } else {
                limit.name().to_owned()
            };
            let mut renamed = Limit::new(name, limit.algorithm(), *limit.quota())?;
            if let Some(parts) = limit.key_parts() {
                renamed = renamed.keyed_by(parts.iter().map(|p| &**p))?;
            }
            let (mut replayer, _) = replayers(std::slice::from_ref(&renamed))?
                .pop()
                .ok_or(ReplayError::NoLimits)?;
            storm(
                &mut replayer,
                clients,
                jitter,
                options.seed,
                period_us(limit),
            );
            finish(replayer, report);
        }
    }
    report.lines = report.limits.iter().map(|l| l.requests).sum();
    for pair in report.limits.chunks(2) {
        // The retries' peak: after the first second, where every client starts at once.
        let peak = |l: &LimitStats| l.per_second.iter().skip(1).map(|p| p[0]).max().unwrap_or(0);
        let (plain, jittered) = (&pair[0], &pair[1]);
        report.expectations.push(Expectation {
            expected: format!(
                "{}: retries at the exact retry_after arrive together (a spike per wait); \
                 with jitter the peak of retries is lower",
                plain.name
            ),
            measured: format!(
                "retries peak at {} requests/s without jitter, {} with",
                peak(plain),
                peak(jittered)
            ),
            met: peak(jittered) < peak(plain),
        });
    }
    Ok(())
}

/// `clients` clients, all starting at T0, each wanting three admissions (the next asked
/// 1 ms after one is admitted), retrying a refusal after its `retry_after` (times 1 to 2
/// with jitter). Stops after 20 periods of virtual time at the latest.
fn storm(replayer: &mut Replayer, clients: usize, jitter: bool, seed: u64, period: u64) {
    let mut rng = XorShift(seed.max(1));
    let mut queue: BinaryHeap<Reverse<(u64, usize)>> =
        (0..clients).map(|c| Reverse((T0_US, c))).collect();
    let mut wanted = vec![3_u32; clients];
    let names = one("all");
    let end = T0_US.saturating_add(period.saturating_mul(20));
    while let Some(Reverse((t, c))) = queue.pop() {
        if t > end {
            break;
        }
        let decision: Decision = replayer.step(t, &names)[0];
        if decision.is_allowed() {
            wanted[c] -= 1;
            if wanted[c] > 0 {
                queue.push(Reverse((t + 1_000, c)));
            }
        } else {
            let wait = decision.retry_after().unwrap_or(Duration::from_secs(1));
            let mut wait = wait.as_micros() as u64;
            if jitter {
                wait += (rng.next_f64() * wait as f64) as u64;
            }
            queue.push(Reverse((t + wait.max(1), c)));
        }
    }
}

fn concurrent(options: &SimOptions, report: &mut Report) -> Result<(), ReplayError> {
    let workers = options.workers.max(1) as u64;
    for limit in &options.limits {
        let each = limit.capacity().saturating_mul(2).div_ceil(workers);
        check_events(
            Scenario::Concurrent,
            u128::from(workers) * u128::from(each),
            "--limit or --workers",
        )?;
        let events: Vec<(u64, u32)> = (0..workers * each).map(|_| (T0_US, 0)).collect();
        run_events(
            std::slice::from_ref(limit),
            &events,
            &one("all"),
            report,
            &mut |_, _, _| {},
        )?;
    }
    report.lines = report.limits.iter().map(|l| l.requests).sum();
    for (l, limit) in report.limits.iter().zip(&options.limits) {
        report.expectations.push(Expectation {
            expected: format!(
                "{}: {workers} workers asking {} in all at the same instant: exactly {} admitted",
                l.name,
                l.requests,
                limit.capacity()
            ),
            measured: format!("{} admitted (virtual clock)", l.admitted),
            met: l.admitted == limit.capacity(),
        });
    }
    Ok(())
}

/// The same on a real Redis: `workers` tasks at once, each asking its share, one key.
async fn concurrent_on_redis(
    url: &str,
    options: &SimOptions,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let store = tollgate_redis::RedisStore::builder(url)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .map_err(|e| ReplayError::Redis(e.to_string()))?;
    let namespace = Namespace::new(format!("tollgate-sim-{}-{}", std::process::id(), T0_US))
        .map_err(ReplayError::Limit)?;
    let limiter = Arc::new(
        Limiter::builder(store)
            .namespace(namespace)
            .limits(options.limits.iter().cloned())
            .build()?,
    );
    let workers = options.workers.max(1) as u64;
    for limit in &options.limits {
        let each = limit.capacity().saturating_mul(2).div_ceil(workers);
        // Every key part the limit is keyed by, as the virtual run fills them (one key:
        // "all"); a limit keyed by `user` checked with `client` alone was refused as a call
        // missing a key part, and each refusal counted as a store failure.
        let key: Arc<[(String, String)]> = limit
            .key_parts()
            .unwrap_or_default()
            .iter()
            .map(|p| (p.to_string(), "all".to_owned()))
            .collect();
        let started = Instant::now();
        let wall_before = unix_us();
        let tasks: Vec<_> = (0..workers)
            .map(|_| {
                let (limiter, name, key) = (limiter.clone(), limit.name().to_owned(), key.clone());
                tokio::spawn(async move {
                    let key: Vec<(&str, &str)> =
                        key.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect();
                    let mut admitted = 0_u64;
                    let mut failed = 0_u64;
                    for _ in 0..each {
                        // A store failure is a verdict (`Unavailable`); an error is a call
                        // the limiter refused as invalid: the simulation's bug, not Redis's.
                        // A limit that allows on a store error says Allowed: still a
                        // failure. Admitted is the rule's decision, as on the virtual clock:
                        // a shadow limit lets every call through, its refusals would-be.
                        let verdict = limiter.check(&name, &key).await?;
                        if verdict.store_error().is_some()
                            || matches!(verdict.outcome(), Outcome::Unavailable { .. })
                        {
                            failed += 1;
                        } else if verdict.decisive().decision.is_allowed() {
                            admitted += 1;
                        }
                    }
                    Ok::<_, tollgate::CheckError>((admitted, failed))
                })
            })
            .collect();
        let (mut admitted, mut failed) = (0, 0);
        for t in tasks {
            let (a, f) = t.await.map_err(|e| ReplayError::Redis(e.to_string()))??;
            admitted += a;
            failed += f;
        }
        let elapsed = started.elapsed();
        // Whether the run may have crossed a window boundary (50 ms either side for the
        // distance between this host's clock and Redis's).
        let window = limit.quota().period_micros();
        let crossed = (wall_before - 50_000) / window != (unix_us() + 50_000) / window;
        let capacity = limit.capacity();
        // What real time may add: refills of the smooth algorithms, a new window.
        let refill = elapsed.as_micros() as u64 / limit.quota().emission_interval_micros().max(1);
        let ceiling = match limit.algorithm() {
            Algorithm::Gcra | Algorithm::TokenBucket => capacity + refill,
            Algorithm::FixedWindow if crossed => 2 * capacity,
            _ => capacity,
        };
        report.expectations.push(Expectation {
            expected: format!(
                "{} on Redis: {workers} concurrent tasks asking {} in all: exactly {capacity} admitted{}",
                limit.name(),
                workers * each,
                if ceiling > capacity {
                    format!(" (up to {ceiling} if time passed: the run took {elapsed:?})")
                } else {
                    String::new()
                }
            ),
            measured: format!("{admitted} admitted, {failed} store failures, in {elapsed:?}"),
            met: failed == 0 && admitted >= capacity && admitted <= ceiling,
        });
    }
    Ok(())
}

/// This host's time, µs since the epoch: only to tell whether a real run crossed a window.
fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
