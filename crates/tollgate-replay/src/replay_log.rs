//! `tollgate replay`: a log, streamed, through a [`Replayer`], into a [`Report`].

use std::io::BufRead;

use tollgate::{Entry, Limit, Namespace, Op, Request, Store, Timestamp};
use tollgate_redis::RedisStore;

use crate::key_mapping::KeyMapping;
use crate::log_format::LogFormat;
use crate::log_reader::{Event, LogReader, Malformed};
use crate::replay_error::ReplayError;
use crate::replayer::Replayer;
use crate::report::{Expectation, MALFORMED_SHOWN, Report};

/// How to read a log.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// Its format; `None`: detected from the first lines (the first that is a JSON object or a combined line; CSV if none is).
    pub format: Option<LogFormat>,
    /// The field holding each line's time (JSON, CSV; default `time`).
    pub time_field: Option<String>,
    /// Which field fills which key part.
    pub mapping: KeyMapping,
    /// A Redis to decide every request on as well, with the log's time passed to the
    /// scripts (the caller's clock), to show they give the memory store's answers. Keys go
    /// under a prefix of their own (`tollgate-replay-<pid>-<time>`), and expire.
    pub redis: Option<RedisStore>,
}

/// Refuses a log at `path` that is not a regular file when `needs` (the options asking for
/// it: `--report`, `--suggest`) reads it again after the replay: a pipe (`/dev/stdin`, a
/// process substitution) is empty the second time, and the replay would be lost to a
/// misleading error at the end rather than refused before it starts.
///
/// A path that cannot be looked at passes: opening it says why, naming it.
///
/// # Errors
/// [`ReplayError::NotRereadable`].
pub fn check_rereadable(path: &std::path::Path, needs: &str) -> Result<(), ReplayError> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err(ReplayError::NotRereadable {
            path: path.display().to_string(),
            needs: needs.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Replays the log `reader` against `limits`; `progress` is called now and then with the
/// bytes read so far. Awaits only with [`LogOptions::redis`].
///
/// # Errors
/// What stops a replay before its first line: an unknown field, a limit keyed by a part no
/// mapping fills, no limit ([`ReplayError`]). Malformed lines do not: they are in the report.
pub async fn replay_log<R: BufRead>(
    reader: R,
    title: &str,
    limits: Vec<Limit>,
    options: &LogOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Report, ReplayError> {
    replay(reader, title, limits, options, None, progress).await
}

/// Picks, for a request, the one limit that decides it and its key, where a rule set does
/// that rather than every limit deciding every request (an Envoy directory: a descriptor is
/// counted by the limit it matches). Given the event's values in the mapping's order: the
/// index of the limit (in the limits' order) and its key's `(part, value)`s in the limit's
/// key order, or `None` when no limit decides the request.
pub type Route<'a> = &'a dyn Fn(&[String]) -> Option<(usize, Vec<(String, String)>)>;

/// [`replay_log`] where `route` picks the one limit deciding each request (or none); the
/// report says how many requests no limit decided. Without [`LogOptions::redis`].
///
/// # Errors
/// As [`replay_log`]; [`ReplayError::Redis`] when [`LogOptions::redis`] is given.
pub async fn replay_log_routed<R: BufRead>(
    reader: R,
    title: &str,
    limits: Vec<Limit>,
    options: &LogOptions,
    route: Route<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report, ReplayError> {
    if options.redis.is_some() {
        return Err(ReplayError::Redis(
            "a routed replay (an Envoy directory) is not compared with Redis".into(),
        ));
    }
    replay(reader, title, limits, options, Some(route), progress).await
}

/// How far a line may jump ahead of the replay's clock without the next line confirming it:
/// one corrupt timestamp years ahead would otherwise move the clock there, and every later
/// line would be decided then (out of order), against limits long replenished or spent.
pub const MAX_JUMP: std::time::Duration = std::time::Duration::from_secs(3_600);

const MAX_JUMP_US: u64 = MAX_JUMP.as_micros() as u64;

/// Counts `m` as malformed, keeping the first few.
fn malformed(report: &mut Report, m: Malformed) {
    report.malformed += 1;
    if report.malformed_examples.len() < MALFORMED_SHOWN {
        report.malformed_examples.push(m);
    }
}

/// `held`, refused for being more than [`MAX_JUMP`] away from `near` (the next line's time, or
/// the clock's at the end).
fn jumped(held: &Event, near: u64) -> Malformed {
    Malformed {
        line: held.line,
        reason: format!(
            "dated {}, more than an hour from the lines around it ({}): a corrupt clock, skipped",
            crate::utc::utc(held.time_us),
            crate::utc::utc(near)
        ),
    }
}

/// Which lines to decide, and when: a line more than [`MAX_JUMP`] ahead of the clock is held
/// until the next line says whether the log jumped (it is near the held line too) or the
/// line is corrupt; before the clock starts, the first line, and a second one far from it,
/// wait for a third to say which of the two is corrupt. Shared by the replay and the passes
/// over a log that must see the same lines at the same times (the suggestion, the keys'
/// timelines).
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// At most two lines.
    held: Vec<Event>,
}

impl Gate {
    /// Takes `event`, given the clock (`None` before the first line is decided; else the
    /// latest time decided): a held line to decide first, and whether to decide `event` now.
    /// Lines found corrupt go to `bad`.
    pub(crate) fn feed(
        &mut self,
        event: &Event,
        clock: Option<u64>,
        bad: &mut dyn FnMut(Malformed),
    ) -> (Option<Event>, bool) {
        let near = |e: &Event| e.time_us.abs_diff(event.time_us) <= MAX_JUMP_US;
        let ahead = |now: u64| event.time_us > now.saturating_add(MAX_JUMP_US);
        match (self.held.len(), clock) {
            (0, None) => {
                self.held.push(event.clone());
                (None, false)
            }
            (0, Some(now)) => {
                if ahead(now) {
                    self.held.push(event.clone());
                    (None, false)
                } else {
                    (None, true)
                }
            }
            (1, _) if near(&self.held[0]) => (self.held.pop(), true),
            (1, None) => {
                self.held.push(event.clone());
                (None, false)
            }
            (1, Some(now)) => {
                let h = self.held.pop().expect("one held");
                bad(jumped(&h, event.time_us));
                if ahead(now) {
                    self.held.push(event.clone());
                    (None, false)
                } else {
                    (None, true)
                }
            }
            _ => {
                // Before the clock: the one of the two this line is near starts it, the
                // other is corrupt; near neither, the first is dropped.
                let (keep, drop) = if near(&self.held[1]) {
                    (Some(1), 0)
                } else if near(&self.held[0]) {
                    (Some(0), 1)
                } else {
                    (None, 0)
                };
                bad(jumped(&self.held[drop], self.held[1 - drop].time_us));
                match keep {
                    Some(k) => {
                        let kept = self.held.swap_remove(k);
                        self.held.clear();
                        (Some(kept), true)
                    }
                    None => {
                        self.held.remove(0);
                        self.held.push(event.clone());
                        (None, false)
                    }
                }
            }
        }
    }

    /// At the end: a line held for a jump had nothing after it to confirm it, and is
    /// dropped (to `bad`); a log of one line keeps it, and of two far apart, both (nothing
    /// says which is wrong): the lines to decide still.
    pub(crate) fn finish(self, clock: Option<u64>, bad: &mut dyn FnMut(Malformed)) -> Vec<Event> {
        match clock {
            None => self.held,
            Some(now) => {
                for h in &self.held {
                    bad(jumped(h, now));
                }
                Vec::new()
            }
        }
    }
}

/// Decides `event`: by the limit its route picks (counting the unrouted), or by every limit
/// (and on the Redis twin, when there is one).
async fn step(
    event: &Event,
    replayer: &mut Replayer,
    route: Option<Route<'_>>,
    unrouted: &mut u64,
    twin: &mut Option<RedisTwin<'_>>,
) {
    if let Some(route) = route {
        let routed = route(&event.values);
        let parts: Vec<(&str, &str)> = routed
            .as_ref()
            .map(|(_, key)| key.iter().map(|(p, v)| (&**p, &**v)).collect())
            .unwrap_or_default();
        let limit = routed.as_ref().map(|(i, _)| *i);
        if replayer.step_one(event.time_us, limit, &parts).is_none() {
            *unrouted += 1;
        }
    } else {
        replayer.step(event.time_us, &event.values);
        if let Some(twin) = twin {
            twin.compare(replayer, event.line).await;
        }
    }
}

async fn replay<R: BufRead>(
    reader: R,
    title: &str,
    limits: Vec<Limit>,
    options: &LogOptions,
    route: Option<Route<'_>>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report, ReplayError> {
    let mut replayer = match route {
        Some(_) => Replayer::routed(limits)?,
        None => Replayer::new(limits, &options.mapping, false)?,
    };
    let mut unrouted = 0_u64;
    let mut twin = options.redis.as_ref().map(RedisTwin::new);
    if let Some(twin) = &twin {
        replayer = replayer.namespace(twin.namespace.clone()).keep_keys();
    }
    let mut log = LogReader::new(
        reader,
        options.format,
        &options.mapping,
        options.time_field.as_deref(),
    )?;
    let mut report = Report {
        title: format!("{title} ({} format)", log.format()),
        ..Report::default()
    };
    let mut event = Event::default();
    let mut gate = Gate::default();
    while let Some(read) = log.next_event(&mut event) {
        report.lines += 1;
        match read {
            Ok(()) => {
                let clock = replayer.start_us().map(|_| replayer.now_us());
                let (first, this) = gate.feed(&event, clock, &mut |m| malformed(&mut report, m));
                if let Some(h) = first {
                    step(&h, &mut replayer, route, &mut unrouted, &mut twin).await;
                }
                if this {
                    step(&event, &mut replayer, route, &mut unrouted, &mut twin).await;
                }
            }
            Err(m) => malformed(&mut report, m),
        }
        if report.lines.is_multiple_of(65_536) {
            progress(log.bytes_read());
        }
    }
    let clock = replayer.start_us().map(|_| replayer.now_us());
    for h in gate.finish(clock, &mut |m| malformed(&mut report, m)) {
        step(&h, &mut replayer, route, &mut unrouted, &mut twin).await;
    }
    progress(log.bytes_read());
    report.span_us = replayer.start_us().map(|s| (s, replayer.now_us()));
    report.out_of_order = replayer.out_of_order();
    report.limits = replayer.into_stats();
    if route.is_some() {
        report.notes.push(format!(
            "{unrouted} requests matched no limit replayed (no rule or descriptor, or one that is \
             unlimited or allows 0 per unit); each other request was decided by the one limit \
             its descriptor matched"
        ));
    }
    if let Some(twin) = twin {
        twin.into_report(&mut report);
    }
    Ok(report)
}

/// The Redis side of a replay: the same requests, decided by the scripts on the log's time.
#[derive(Debug)]
struct RedisTwin<'a> {
    store: &'a RedisStore,
    namespace: Namespace,
    compared: u64,
    differ: u64,
    failed: u64,
    examples: Vec<String>,
}

impl<'a> RedisTwin<'a> {
    fn new(store: &'a RedisStore) -> RedisTwin<'a> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let prefix = format!("tollgate-replay-{}-{nanos}", std::process::id());
        RedisTwin {
            store,
            namespace: Namespace::new(prefix).expect("a valid prefix"),
            compared: 0,
            differ: 0,
            failed: 0,
            examples: Vec::new(),
        }
    }

    /// Decides the replayer's last step on Redis and compares, limit by limit.
    async fn compare(&mut self, replayer: &Replayer, line: u64) {
        let now = Timestamp::from_micros(replayer.now_us());
        for (limit, key, memory) in replayer.last_step() {
            let request = Request::new([Entry::new(limit, key.clone())], 1)
                .expect("a cost of one unit fits every limit");
            self.compared += 1;
            match self.store.decide(&request, Op::Check, Some(now)).await {
                Ok(d) => {
                    let redis = &d[0];
                    let same = redis.is_allowed() == memory.is_allowed()
                        && redis.remaining == memory.remaining
                        && redis.retry_after() == memory.retry_after();
                    if !same {
                        self.differ += 1;
                        if self.examples.len() < MALFORMED_SHOWN {
                            self.examples.push(format!(
                                "line {line}, {}: memory {memory:?}, Redis {redis:?}",
                                limit.name()
                            ));
                        }
                    }
                }
                Err(e) => {
                    self.failed += 1;
                    if self.examples.len() < MALFORMED_SHOWN {
                        self.examples
                            .push(format!("line {line}, {}: Redis failed: {e}", limit.name()));
                    }
                }
            }
        }
    }

    fn into_report(self, report: &mut Report) {
        report.expectations.push(Expectation {
            expected: "Redis's scripts, given the log's time, decide every request as the \
                       memory store does (admitted, remaining, retry_after)"
                .into(),
            measured: format!(
                "{} decisions compared: {} differ, {} failed on Redis",
                self.compared, self.differ, self.failed
            ),
            met: self.differ == 0 && self.failed == 0,
        });
        report.notes.extend(self.examples);
    }
}

/// What a pass over a log saw ([`each_decided`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pass {
    /// Lines read.
    pub lines: u64,
    /// Lines decided.
    pub decided: u64,
    /// The first decided line's second, and the clock at the end (µs since the epoch).
    pub span_us: Option<(u64, u64)>,
}

/// Reads `reader` as a replay does (the same lines held, dropped and decided, on the same
/// clock that never goes back) and calls `f(now_us, start_us, event)` for each line decided,
/// in order: `now_us` the time it is decided at, `start_us` the first decided line's second.
pub(crate) fn each_decided<R: BufRead>(
    reader: R,
    options: &LogOptions,
    f: &mut dyn FnMut(u64, u64, &Event),
) -> Result<Pass, ReplayError> {
    let mut log = LogReader::new(
        reader,
        options.format,
        &options.mapping,
        options.time_field.as_deref(),
    )?;
    let mut pass = Pass::default();
    let mut clock: Option<(u64, u64)> = None;
    let mut decide = |e: &Event, clock: &mut Option<(u64, u64)>, pass: &mut Pass| {
        let (start, now) = clock.get_or_insert((e.time_us - e.time_us % 1_000_000, e.time_us));
        *now = (*now).max(e.time_us);
        pass.decided += 1;
        f(*now, *start, e);
    };
    let mut event = Event::default();
    let mut gate = Gate::default();
    while let Some(read) = log.next_event(&mut event) {
        pass.lines += 1;
        if read.is_ok() {
            let (first, this) = gate.feed(&event, clock.map(|c| c.1), &mut |_| {});
            if let Some(h) = first {
                decide(&h, &mut clock, &mut pass);
            }
            if this {
                decide(&event, &mut clock, &mut pass);
            }
        }
    }
    for h in gate.finish(clock.map(|c| c.1), &mut |_| {}) {
        decide(&h, &mut clock, &mut pass);
    }
    pass.span_us = clock;
    Ok(pass)
}
